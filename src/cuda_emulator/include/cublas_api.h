// cuBLAS on the CPU emulator (the toolkit's cublas_api.h, which cublas_v2.h and
// cublasLt.h include): its types with the toolkit's values, and the GEMMs programs
// check their kernels against, computed on the CPU (device memory is the host's):
// cublasSgemm, cublasDgemm, cublasHgemm, their StridedBatched forms, cublasGemmEx and
// cublasGemmStridedBatchedEx (A and B of one type, 16F, 16BF, 32F or 64F; C of theirs
// or 32F). Column-major, as cuBLAS: C = alpha op(A) op(B) + beta C, summed in the
// compute type (float, or double for 64F), C not read where beta is 0. Any other
// routine fails to compile, naming it.
#pragma once

#include "cuda_emulator.h"
#include "library_types.h"

typedef struct cublasContext* cublasHandle_t;
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3, CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum {
  CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_16F_PEDANTIC = 65, CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69, CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75, CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70, CUBLAS_COMPUTE_32I = 72
} cublasComputeType_t;
typedef enum {
  CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3
} cublasMath_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 }
    cublasGemmAlgo_t;

inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = nullptr;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_ERROR";
}

inline cublasStatus_t cublasGetStream(cublasHandle_t, cudaStream_t* s) {
  *s = nullptr;
  return CUBLAS_STATUS_SUCCESS;
}

namespace attnbook_emu::blas {

// op(X)[row, col] of a column-major X with leading dimension ld.
template <class T>
inline T at(const T* x, cublasOperation_t op, long row, long col, long ld) {
  return op == CUBLAS_OP_N ? x[row + col * ld] : x[col + row * ld];
}

// The arguments' shape: cuBLAS's rules for m, n, k and the leading dimensions.
inline bool shape_ok(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                     long lda, long ldb, long ldc) {
  auto op_ok = [](cublasOperation_t t) { return t >= CUBLAS_OP_N && t <= CUBLAS_OP_C; };
  return op_ok(ta) && op_ok(tb) && m >= 0 && n >= 0 && k >= 0 &&
         lda >= std::max(1, ta == CUBLAS_OP_N ? m : k) &&
         ldb >= std::max(1, tb == CUBLAS_OP_N ? k : n) && ldc >= std::max(1, m);
}

template <class Acc, class AB, class C>
inline void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 Acc alpha, const AB* a, long lda, const AB* b, long ldb, Acc beta,
                 C* c, long ldc) {
  for (long j = 0; j < n; ++j)
    for (long i = 0; i < m; ++i) {
      Acc sum = 0;
      for (long p = 0; p < k; ++p)
        sum += Acc(float(at(a, ta, i, p, lda))) * Acc(float(at(b, tb, p, j, ldb)));
      C& out = c[i + j * ldc];
      out = C(beta == Acc(0) ? alpha * sum : alpha * sum + beta * Acc(float(out)));
    }
}

template <class Acc, class AB, class C>
inline cublasStatus_t strided(cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                              int k, const Acc* alpha, const AB* a, long lda,
                              long long sa, const AB* b, long ldb, long long sb,
                              const Acc* beta, C* c, long ldc, long long sc,
                              int batches) {
  if (!shape_ok(ta, tb, m, n, k, lda, ldb, ldc) || batches < 0 || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < batches; ++i)
    gemm<Acc>(ta, tb, m, n, k, *alpha, a + i * sa, lda, b + i * sb, ldb, *beta,
              c + i * sc, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

// cublasGemmEx's types: f(AB*, C*, Acc*) with the element types of A and B, of C, and
// the compute type's scalar; false where the emulator has no such GEMM.
template <class F>
inline bool with_types(cudaDataType ab, cudaDataType c, cublasComputeType_t compute,
                       F f) {
  auto typed = [&](auto* x) {
    using AB = std::remove_pointer_t<decltype(x)>;
    const bool c_same = c == ab, c_float = c == CUDA_R_32F;
    if (compute == CUBLAS_COMPUTE_64F) {
      if (ab != CUDA_R_64F || !c_same) return false;
      f(x, x, static_cast<double*>(nullptr));
    } else if (compute == CUBLAS_COMPUTE_16F ||
               compute == CUBLAS_COMPUTE_16F_PEDANTIC) {
      if (ab != CUDA_R_16F || !c_same) return false;
      f(x, x, static_cast<__half*>(nullptr));
    } else if (c_same) {
      f(x, x, static_cast<float*>(nullptr));
    } else if (c_float) {
      f(x, static_cast<float*>(nullptr), static_cast<float*>(nullptr));
    } else {
      return false;
    }
    return true;
  };
  switch (ab) {
    case CUDA_R_32F: return typed(static_cast<float*>(nullptr));
    case CUDA_R_64F: return compute == CUBLAS_COMPUTE_64F &&
                            typed(static_cast<double*>(nullptr));
    case CUDA_R_16F: return typed(static_cast<__half*>(nullptr));
    case CUDA_R_16BF: return typed(static_cast<__nv_bfloat16*>(nullptr));
    default: return false;
  }
}

}  // namespace attnbook_emu::blas

#define ATTNBOOK_GEMM(NAME, T)                                                      \
  inline cublasStatus_t NAME(cublasHandle_t, cublasOperation_t ta,                   \
                             cublasOperation_t tb, int m, int n, int k,             \
                             const T* alpha, const T* a, int lda, const T* b,        \
                             int ldb, const T* beta, T* c, int ldc) {                \
    return ::attnbook_emu::blas::strided(ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, \
                                         0, beta, c, ldc, 0, 1);                    \
  }                                                                                  \
  inline cublasStatus_t NAME##StridedBatched(                                        \
      cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,      \
      int k, const T* alpha, const T* a, int lda, long long sa, const T* b, int ldb, \
      long long sb, const T* beta, T* c, int ldc, long long sc, int batches) {       \
    return ::attnbook_emu::blas::strided(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb,\
                                         sb, beta, c, ldc, sc, batches);            \
  }
ATTNBOOK_GEMM(cublasSgemm, float)
ATTNBOOK_GEMM(cublasDgemm, double)
ATTNBOOK_GEMM(cublasHgemm, __half)
#undef ATTNBOOK_GEMM

inline cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void* alpha, const void* a, cudaDataType at, int lda, long long sa,
    const void* b, cudaDataType bt, int ldb, long long sb, const void* beta, void* c,
    cudaDataType ct, int ldc, long long sc, int batches, cublasComputeType_t compute,
    cublasGemmAlgo_t) {
  cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
  if (at != bt) return status;
  ::attnbook_emu::blas::with_types(at, ct, compute, [&](auto* ab, auto* cc, auto* acc) {
    using AB = std::remove_pointer_t<decltype(ab)>;
    using C = std::remove_pointer_t<decltype(cc)>;
    using Acc = std::remove_pointer_t<decltype(acc)>;
    status = ::attnbook_emu::blas::strided(
        ta, tb, m, n, k, static_cast<const Acc*>(alpha), static_cast<const AB*>(a), lda,
        sa, static_cast<const AB*>(b), ldb, sb, static_cast<const Acc*>(beta),
        static_cast<C*>(c), ldc, sc, batches);
  });
  return status;
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
                                   cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* a, cudaDataType at,
                                   int lda, const void* b, cudaDataType bt, int ldb,
                                   const void* beta, void* c, cudaDataType ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, a, at, lda, 0, b, bt,
                                    ldb, 0, beta, c, ct, ldc, 0, 1, compute, algo);
}
