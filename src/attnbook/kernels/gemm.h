// The host launcher of chapter 4's GEMM steps (gemm.cu). Host code only: the wrapper,
// compiled without CUDA, includes it too.
#pragma once
#include <cuda_runtime.h>

// c[z] = a[z] · b[z]ᵀ (b_transposed) or a[z] · b[z] for z < batch; a: [batch, M, K],
// b: [batch, N, K] or [batch, K, N], c: [batch, M, N], all contiguous. step: 1–4.
// Returns false for an unknown step.
bool gemm_forward(const float* a, const float* b, float* c, int batch, int M, int N,
                  int K, bool b_transposed, int step, cudaStream_t stream);
