#include "attnbook_torch.h"

void launch_relu(const float*, float*, int, cudaStream_t);
at::Tensor relu_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  at::Tensor y = x.new_full(x.sizes(), NAN);
  launch_relu(x.data_ptr<float>(), y.data_ptr<float>(), int(x.numel()),
              attnbook::stream());
  attnbook::check_launch();
  return y;
}
