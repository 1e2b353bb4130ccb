#include "attnbook_torch.h"

void launch_row_logsumexp(const float*, float*, int, int, cudaStream_t);
at::Tensor row_logsumexp_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() == 2, "x must be [R, n]");
  at::Tensor lse = x.new_full({x.size(0)}, NAN);
  launch_row_logsumexp(x.data_ptr<float>(), lse.data_ptr<float>(), int(x.size(0)),
                       int(x.size(1)), attnbook::stream());
  attnbook::check_launch();
  return lse;
}
