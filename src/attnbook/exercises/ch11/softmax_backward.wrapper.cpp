#include "attnbook_torch.h"

void launch_softmax_backward(const float*, const float*, float*, int, int,
                             cudaStream_t);
at::Tensor softmax_backward_of(at::Tensor p, at::Tensor dp) {
  attnbook::check_tensor(p, "p", at::kFloat);
  attnbook::check_tensor(dp, "dp", at::kFloat);
  TORCH_CHECK(p.dim() == 2 && p.sizes() == dp.sizes(), "p and dp must be [R, n]");
  at::Tensor ds = p.new_full(p.sizes(), NAN);
  launch_softmax_backward(p.data_ptr<float>(), dp.data_ptr<float>(),
                          ds.data_ptr<float>(), int(p.size(0)), int(p.size(1)),
                          attnbook::stream());
  attnbook::check_launch();
  return ds;
}
