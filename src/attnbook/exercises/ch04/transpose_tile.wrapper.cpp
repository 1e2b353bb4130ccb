#include "attnbook_torch.h"

void launch_transpose(const float*, float*, int, int, cudaStream_t);
at::Tensor transpose_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() == 2, "x must be [M, N]");
  at::Tensor y = x.new_full({x.size(1), x.size(0)}, NAN);
  launch_transpose(x.data_ptr<float>(), y.data_ptr<float>(), int(x.size(0)),
                   int(x.size(1)), attnbook::stream());
  attnbook::check_launch();
  return y;
}
