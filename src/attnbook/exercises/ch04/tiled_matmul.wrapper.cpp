#include "attnbook_torch.h"

void launch_tiled_matmul(const float*, const float*, float*, int, int, int,
                         cudaStream_t);
at::Tensor tiled_matmul_of(at::Tensor a, at::Tensor b) {
  attnbook::check_tensor(a, "a", at::kFloat);
  attnbook::check_tensor(b, "b", at::kFloat);
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
              "a must be [M, K] and b [K, N]");
  at::Tensor c = a.new_full({a.size(0), b.size(1)}, NAN);
  launch_tiled_matmul(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(),
                      int(a.size(0)), int(b.size(1)), int(a.size(1)),
                      attnbook::stream());
  attnbook::check_launch();
  return c;
}
