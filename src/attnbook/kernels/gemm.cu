// Chapter 4's GEMM steps behind one launcher: C[z] = A[z] · B[z]ᵀ (b_transposed) or
// A[z] · B[z].
#include "gemm.cuh"
#include "gemm.h"

// a: [batch, M, K]; b: [batch, N, K] or [batch, K, N]; c: [batch, M, N]; all
// contiguous. Returns false for an unknown step.
bool gemm_forward(const float* a, const float* b, float* c, int batch, int M, int N,
                  int K,
                  bool b_transposed, int step, cudaStream_t stream) {
  const Gemm g{a, b, c, M, N, K, K, b_transposed ? K : N, N,
               (long long)M * K, (long long)N * K, (long long)M * N, 1};
  return b_transposed ? gemm_launch<true>(g, batch, step, stream)
                      : gemm_launch<false>(g, batch, step, stream);
}
