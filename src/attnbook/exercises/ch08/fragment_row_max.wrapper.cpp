#include "attnbook_torch.h"

void launch_fragment_row_max(const float*, float*, int, cudaStream_t);
at::Tensor fragment_row_max_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() == 3 && x.size(1) == 16 && x.size(2) == 8,
              "x must be [T, 16, 8]");
  at::Tensor out = x.new_full({x.size(0), 16}, NAN);
  launch_fragment_row_max(x.data_ptr<float>(), out.data_ptr<float>(), int(x.size(0)),
                          attnbook::stream());
  attnbook::check_launch();
  return out;
}
