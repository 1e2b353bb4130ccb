#include "attnbook_torch.h"

void launch_key_padding(const float*, const int*, float*, int, int, int, cudaStream_t);
at::Tensor key_padding_of(at::Tensor s, at::Tensor lengths) {
  attnbook::check_tensor(s, "s", at::kFloat);
  attnbook::check_tensor(lengths, "lengths", at::kInt);
  TORCH_CHECK(s.dim() == 3 && lengths.dim() == 1 && lengths.size(0) == s.size(0),
              "s must be [B, Sq, Sk] and lengths [B]");
  at::Tensor out = s.new_full(s.sizes(), NAN);
  launch_key_padding(s.data_ptr<float>(), lengths.data_ptr<int>(),
                     out.data_ptr<float>(), int(s.size(0)), int(s.size(1)),
                     int(s.size(2)), attnbook::stream());
  attnbook::check_launch();
  return out;
}
