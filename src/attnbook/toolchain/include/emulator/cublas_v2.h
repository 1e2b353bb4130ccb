// cuBLAS on the CPU emulator: the handle and status types only, for kernel files that
// include cublas_v2.h without calling it. cuBLAS's routines are not emulated: a call of
// one fails to compile, naming it.
#pragma once
typedef struct cublasContext* cublasHandle_t;
enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_NOT_SUPPORTED = 15
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = nullptr;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_ERROR";
}
