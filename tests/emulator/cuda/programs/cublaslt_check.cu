// A program that checks cuBLASLt's matmul against its own kernel, as programs that
// call cuBLASLt for a fused bias and ReLU do: prints "name ok" for each check, or
// "name wrong" (or "name status N" where cuBLASLt refused).
#include <cmath>
#include <cstdio>
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Column-major D[m, n] = act(alpha A B + beta C + bias), A stored [k, m] (used
// transposed) when a_t, one thread per element, in float.
template <class T>
__global__ void reference(const T* a, const T* b, const T* c, const T* bias, T* d,
                          int m, int n, int k, bool a_t, float alpha, float beta,
                          bool relu) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m * n) return;
  const int row = i % m, col = i / m;
  float sum = 0.f;
  for (int p = 0; p < k; ++p)
    sum += float(a_t ? a[p + row * k] : a[row + p * m]) * float(b[p + col * k]);
  float v = alpha * sum + beta * float(c[i]) + (bias ? float(bias[row]) : 0.f);
  d[i] = T(relu && v < 0.f ? 0.f : v);
}

template <class T>
void report(const T* x, const T* y, int count, float tol, const char* name,
            cublasStatus_t status) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::printf("%s status %d\n", name, int(status));
    return;
  }
  float worst = 0.f;
  for (int i = 0; i < count; ++i)
    worst = std::fmax(worst, std::fabs(float(x[i]) - float(y[i])));
  std::printf("%s %s\n", name, worst <= tol ? "ok" : "wrong");
}

template <class T>
T* filled(int count, float step) {
  T* p;
  cudaMallocManaged(&p, count * sizeof(T));
  for (int i = 0; i < count; ++i) p[i] = T(std::sin(step * i));
  return p;
}

// One product of m x k by k x n, batches of them, through cuBLASLt and the kernel.
template <class T>
void check(const char* name, cudaDataType type, cublasComputeType_t compute,
           cudaDataType scale_type, int m, int n, int k, int batches, bool a_t,
           cublasLtEpilogue_t epilogue, float beta, float tol) {
  T* a = filled<T>(batches * m * k, 0.37f);
  T* b = filled<T>(batches * k * n, 0.11f);
  T* c = filled<T>(batches * m * n, 0.05f);
  T* bias = filled<T>(m, 0.7f);
  T* d = filled<T>(batches * m * n, 0.f);
  T* want = filled<T>(batches * m * n, 0.f);
  const bool relu = epilogue == CUBLASLT_EPILOGUE_RELU ||
                    epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool with_bias = epilogue == CUBLASLT_EPILOGUE_BIAS ||
                         epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  for (int i = 0; i < batches; ++i)
    reference<<<(m * n + 127) / 128, 128>>>(a + i * m * k, b + i * k * n,
                                           c + i * m * n, with_bias ? bias : nullptr,
                                           want + i * m * n, m, n, k, a_t, 1.5f,
                                           beta, relu);
  cudaDeviceSynchronize();

  cublasLtHandle_t h;
  cublasLtCreate(&h);
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, compute, scale_type);
  cublasOperation_t trans = a_t ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                 sizeof epilogue);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                 sizeof bias);
  cublasLtMatrixLayout_t al, bl, cl;
  cublasLtMatrixLayoutCreate(&al, type, a_t ? k : m, a_t ? m : k, a_t ? k : m);
  cublasLtMatrixLayoutCreate(&bl, type, k, n, k);
  cublasLtMatrixLayoutCreate(&cl, type, m, n, m);
  const long long strides[] = {(long long)m * k, (long long)k * n, (long long)m * n};
  cublasLtMatrixLayout_t layouts[] = {al, bl, cl};
  for (int i = 0; i < 3; ++i) {
    cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                     &batches, sizeof batches);
    cublasLtMatrixLayoutSetAttribute(layouts[i],
                                     CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                     &strides[i], sizeof strides[i]);
  }
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulHeuristicResult_t found;
  int count = 0;
  cublasLtMatmulAlgoGetHeuristic(h, op, al, bl, cl, cl, pref, 1, &found, &count);
  // alpha and beta in the scale type: float here, half for a half compute type
  float alpha_f = 1.5f;
  __half alpha_h = __float2half(1.5f), beta_h = __float2half(beta);
  const bool half_scale = scale_type == CUDA_R_16F;
  cublasStatus_t status = cublasLtMatmul(
      h, op, half_scale ? (const void*)&alpha_h : &alpha_f, a, al, b, bl,
      half_scale ? (const void*)&beta_h : &beta, c, cl, d, cl, &found.algo, nullptr,
      0, 0);
  report(d, want, batches * m * n, tol, name, status);
  cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : layouts) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(h);
  for (T* p : {a, b, c, bias, d, want}) cudaFree(p);
}

int main() {
  check<float>("fp32", CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, 37, 29, 45, 1,
               false, CUBLASLT_EPILOGUE_DEFAULT, 0.f, 1e-4f);
  check<float>("transposed_bias_relu", CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, 21,
               19, 33, 1, true, CUBLASLT_EPILOGUE_RELU_BIAS, 0.f, 1e-4f);
  check<float>("batched_beta_bias", CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, 16, 9,
               24, 3, false, CUBLASLT_EPILOGUE_BIAS, 0.5f, 1e-4f);
  check<__half>("fp16_relu", CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F, 24, 16, 40,
                2, false, CUBLASLT_EPILOGUE_RELU, 0.f, 2e-2f);
  check<float>("gelu_refused", CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, 8, 8, 8, 1,
               false, CUBLASLT_EPILOGUE_GELU, 0.f, 1e-4f);
  check<float>("scale_type_refused", CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_16F, 8, 8,
               8, 1, false, CUBLASLT_EPILOGUE_DEFAULT, 0.f, 1e-4f);
  return 0;
}
