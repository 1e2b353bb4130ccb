// A program that checks its own GEMM kernel against cuBLAS, as tutorials do: the
// emulator's cuBLAS runs the reference. Prints "name ok" for each check, or "name
// wrong".
#include <cmath>
#include <cstdio>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Row-major C[M, N] = A[M, K] B[K, N], one thread per element.
__global__ void naive_gemm(const float* a, const float* b, float* c, int m, int n,
                           int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float sum = 0.f;
  for (int p = 0; p < k; ++p) sum += a[row * k + p] * b[p * n + col];
  c[row * n + col] = sum;
}

bool close(const float* x, const float* y, int n, float tol, const char* name) {
  float worst = 0.f;
  for (int i = 0; i < n; ++i) worst = std::fmax(worst, std::fabs(x[i] - y[i]));
  std::printf("%s %s\n", name, worst <= tol ? "ok" : "wrong");
  return worst <= tol;
}

int main() {
  const int m = 37, n = 29, k = 45, batches = 3;
  float *a, *b, *c, *ref;
  cudaMallocManaged(&a, batches * m * k * sizeof(float));
  cudaMallocManaged(&b, batches * k * n * sizeof(float));
  cudaMallocManaged(&c, batches * m * n * sizeof(float));
  cudaMallocManaged(&ref, batches * m * n * sizeof(float));
  for (int i = 0; i < batches * m * k; ++i) a[i] = std::sin(0.37f * i);
  for (int i = 0; i < batches * k * n; ++i) b[i] = std::cos(0.11f * i);

  naive_gemm<<<dim3((n + 15) / 16, (m + 15) / 16), dim3(16, 16)>>>(a, b, c, m, n, k);
  cudaDeviceSynchronize();
  cublasHandle_t h;
  cublasCreate(&h);
  const float one = 1.f, zero = 0.f;
  // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS's usual trick.
  for (int i = 0; i < m * n; ++i) ref[i] = NAN;   // beta = 0: never read
  cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, n, a, k, &zero, ref, n);
  close(c, ref, m * n, 1e-4f, "sgemm");

  // The same product with A transposed in memory (A^T stored [K, M]): op T.
  float* at;
  cudaMallocManaged(&at, m * k * sizeof(float));
  for (int r = 0; r < m; ++r)
    for (int p = 0; p < k; ++p) at[p * m + r] = a[r * k + p];
  cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, n, m, k, &one, b, n, at, m, &zero, ref, n);
  close(c, ref, m * n, 1e-4f, "sgemm_transposed");

  // alpha and beta: ref = 2 A B - ref
  const float two = 2.f, minus = -1.f;
  cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &two, b, n, a, k, &minus, ref, n);
  close(c, ref, m * n, 1e-4f, "alpha_beta");

  // fp16 inputs, fp32 output and compute (GemmEx), and a batch of three.
  __half *ah, *bh;
  cudaMallocManaged(&ah, m * k * sizeof(__half));
  cudaMallocManaged(&bh, k * n * sizeof(__half));
  for (int i = 0; i < m * k; ++i) ah[i] = __float2half(a[i]);
  for (int i = 0; i < k * n; ++i) bh[i] = __float2half(b[i]);
  cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, bh, CUDA_R_16F, n, ah,
               CUDA_R_16F, k, &zero, ref, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
               CUBLAS_GEMM_DEFAULT);
  close(c, ref, m * n, 0.05f, "gemm_ex_fp16");

  for (int i = 0; i < batches; ++i)
    naive_gemm<<<dim3((n + 15) / 16, (m + 15) / 16), dim3(16, 16)>>>(
        a + i * m * k, b + i * k * n, c + i * m * n, m, n, k);
  cudaDeviceSynchronize();
  cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, n,
                            (long long)k * n, a, k, (long long)m * k, &zero, ref, n,
                            (long long)m * n, batches);
  close(c, ref, batches * m * n, 1e-4f, "strided_batched");

  // A leading dimension too small is refused, as cuBLAS refuses it.
  const cublasStatus_t bad = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b,
                                         n - 1, a, k, &zero, ref, n);
  std::printf("bad_lda %s\n", bad == CUBLAS_STATUS_INVALID_VALUE ? "ok" : "wrong");
  cublasDestroy(h);
  return 0;
}
