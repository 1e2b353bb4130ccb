// torch.ops.attnbook.gemm's C++ side (ops/gemm.py): checks the operands and launches a
// step of chapter 4's GEMM (gemm.cu).
#include "attnbook_torch.h"   // first: torch's names before the kernels' structs
#include "gemm.h"

// c: a new [batch, M, N] = a [batch, M, K] times b [batch, K, N] (or bᵀ for
// b [batch, N, K]).
at::Tensor gemm_batched(at::Tensor a, at::Tensor b, bool b_transposed, int64_t step) {
  attnbook::check_tensor(a, "a", at::kFloat);
  attnbook::check_tensor(b, "b", at::kFloat);
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0),
              "a and b must be [batch, ., .]");
  const int64_t M = a.size(1), K = a.size(2), N = b_transposed ? b.size(1) : b.size(2);
  TORCH_CHECK((b_transposed ? b.size(2) : b.size(1)) == K, "inner dimensions differ");
  TORCH_CHECK(a.size(0) <= INT32_MAX && M <= INT32_MAX && N <= INT32_MAX &&
              K <= INT32_MAX && M * K <= INT32_MAX && N * K <= INT32_MAX &&
              M * N <= INT32_MAX,
              "each operand must have fewer than 2^31 elements per batch");
  attnbook::DeviceGuard guard(a);
  at::Tensor c = a.new_empty({a.size(0), M, N});
  TORCH_CHECK(gemm_forward(a.data_ptr<float>(), b.data_ptr<float>(),
                           c.data_ptr<float>(), int(a.size(0)), int(M), int(N), int(K),
                           b_transposed, int(step), attnbook::stream()),
              "unknown GEMM step ", step);
  attnbook::check_launch();
  return c;
}
