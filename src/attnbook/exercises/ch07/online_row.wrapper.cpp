#include "attnbook_torch.h"

void launch_online_row(const float*, const float*, float*, int, int, int, cudaStream_t);
at::Tensor online_row_of(at::Tensor s, at::Tensor v) {
  attnbook::check_tensor(s, "s", at::kFloat);
  attnbook::check_tensor(v, "v", at::kFloat);
  TORCH_CHECK(s.dim() == 2 && v.dim() == 2 && v.size(0) == s.size(1) && v.size(1) <= 64,
              "s must be [R, n] and v [n, D] with D <= 64");
  at::Tensor o = s.new_full({s.size(0), v.size(1)}, NAN);
  launch_online_row(s.data_ptr<float>(), v.data_ptr<float>(), o.data_ptr<float>(),
                    int(s.size(0)), int(s.size(1)), int(v.size(1)), attnbook::stream());
  attnbook::check_launch();
  return o;
}
