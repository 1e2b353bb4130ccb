// torch.ops.attnbook.softmax's C++ side (ops/softmax.py): checks the tensor and
// launches one of chapter 3's softmax kernels (softmax.cu).
#include <string>

#include "attnbook_torch.h"   // first: torch's names before the kernels' structs
#include "softmax.h"

// y: a new tensor of x's shape, softmax over its last dimension.
at::Tensor softmax_last_dim(at::Tensor x, std::string kernel) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  attnbook::DeviceGuard guard(x);
  at::Tensor y = x.new_empty(x.sizes());
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  TORCH_CHECK(rows <= INT32_MAX && n <= INT32_MAX,
              "x is too large: rows and row length must be below 2^31");
  TORCH_CHECK(softmax_forward(kernel.c_str(), x.data_ptr<float>(), y.data_ptr<float>(),
                              int(rows), int(n), attnbook::stream()),
              "unknown softmax kernel ", kernel);
  attnbook::check_launch();
  return y;
}
