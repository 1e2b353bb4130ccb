// cuBLASLt on the CPU emulator: its handle, descriptor and attribute types with the
// toolkit's values, and its matmul for the plain cases programs use to check their
// kernels: D = epilogue(alpha op(A) op(B) + beta C [+ bias]) over column-major
// layouts, with transposes, strided batches, the types and compute types cublasGemmEx
// takes (cublas_api.h), and the DEFAULT, RELU, BIAS and RELU_BIAS epilogues, summed
// in the compute type and rounded once into D. Anything else (row-major or other
// orders, other epilogues, scale types other than the compute type's) returns
// CUBLAS_STATUS_NOT_SUPPORTED, so that a program's check fails rather than passing on
// a wrong product.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include "cublas_api.h"

typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;
typedef enum {
  CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7, CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8
} cublasLtMatmulDescAttributes_t;
typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_RELU_BIAS = 6,
  CUBLASLT_EPILOGUE_GELU = 32, CUBLASLT_EPILOGUE_GELU_BIAS = 36
} cublasLtEpilogue_t;
typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 }
    cublasLtMatmulPreferenceAttributes_t;
typedef enum {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0, CUBLASLT_MATRIX_LAYOUT_ORDER = 1,
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2, CUBLASLT_MATRIX_LAYOUT_COLS = 3,
  CUBLASLT_MATRIX_LAYOUT_LD = 4, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6
} cublasLtMatrixLayoutAttribute_t;
typedef enum { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1 } cublasLtOrder_t;

struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType scale;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  int32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t order = CUBLASLT_ORDER_COL, batches = 1;
  int64_t stride = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {};

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = nullptr;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t) {
  return CUBLAS_STATUS_SUCCESS;
}

// ---- descriptors: plain structs; an attribute is copied in, as the library does ----
namespace attnbook_emu::blas {
template <class T>
inline cublasStatus_t set_field(T& field, const void* buf, size_t bytes) {
  if (!buf || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace attnbook_emu::blas

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d,
                                               cublasComputeType_t compute,
                                               cudaDataType scale) {
  *d = new cublasLtMatmulDescOpaque_t{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                     cublasLtMatmulDescAttributes_t a,
                                                     const void* buf, size_t bytes) {
  using ::attnbook_emu::blas::set_field;
  switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_field(d->trans_a, buf, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_field(d->trans_b, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_field(d->epilogue, buf, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_field(d->bias, buf, bytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l,
                                                 cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
  *l = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(
    cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void* buf,
    size_t bytes) {
  using ::attnbook_emu::blas::set_field;
  switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return set_field(l->order, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set_field(l->batches, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return set_field(l->stride, buf, bytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void*,
    size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
// One algorithm, which needs no workspace.
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
    cublasLtMatmulPreference_t, int requested, cublasLtMatmulHeuristicResult_t* out,
    int* returned) {
  if (requested < 1 || !out || !returned) return CUBLAS_STATUS_INVALID_VALUE;
  out[0] = {};
  out[0].state = CUBLAS_STATUS_SUCCESS;
  out[0].wavesCount = 1.f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

namespace attnbook_emu::blas {
// D[i, j] = epilogue(alpha sum_p op(A)[i, p] op(B)[p, j] + beta C[i, j] + bias[i]),
// in Acc, rounded once into D's type.
template <class Acc, class AB, class C>
inline void lt_gemm(const cublasLtMatmulDescOpaque_t& d, long m, long n, long k,
                    Acc alpha, const AB* a, long lda, const AB* b, long ldb, Acc beta,
                    const C* c, long ldc, C* out, long ldd) {
  const auto ta = cublasOperation_t(d.trans_a), tb = cublasOperation_t(d.trans_b);
  const bool relu = d.epilogue == CUBLASLT_EPILOGUE_RELU ||
                    d.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool bias = d.epilogue == CUBLASLT_EPILOGUE_BIAS ||
                    d.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  for (long j = 0; j < n; ++j)
    for (long i = 0; i < m; ++i) {
      Acc sum = 0;
      for (long p = 0; p < k; ++p)
        sum += Acc(float(at(a, ta, i, p, lda))) * Acc(float(at(b, tb, p, j, ldb)));
      Acc v = alpha * sum;
      if (beta != Acc(0)) v = v + beta * Acc(float(c[i + j * ldc]));
      if (bias) v = v + Acc(float(static_cast<const C*>(d.bias)[i]));
      if (relu && v < Acc(0)) v = Acc(0);
      out[i + j * ldd] = C(v);
    }
}
}  // namespace attnbook_emu::blas

inline cublasStatus_t cublasLtMatmul(
    cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha, const void* a,
    cublasLtMatrixLayout_t al, const void* b, cublasLtMatrixLayout_t bl,
    const void* beta, const void* c, cublasLtMatrixLayout_t cl, void* out,
    cublasLtMatrixLayout_t dl, const cublasLtMatmulAlgo_t*, void*, size_t,
    cudaStream_t) {
  if (!d || !al || !bl || !cl || !dl || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  const auto ta = cublasOperation_t(d->trans_a), tb = cublasOperation_t(d->trans_b);
  const long m = long(dl->rows), n = long(dl->cols);
  const long k = long(ta == CUBLAS_OP_N ? al->cols : al->rows);
  const bool epilogue_ok = d->epilogue == CUBLASLT_EPILOGUE_DEFAULT ||
                           d->epilogue == CUBLASLT_EPILOGUE_RELU ||
                           (d->bias && (d->epilogue == CUBLASLT_EPILOGUE_BIAS ||
                                        d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS));
  for (auto* l : {al, bl, cl, dl})
    if (l->order != CUBLASLT_ORDER_COL || l->batches != dl->batches)
      return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!epilogue_ok || al->type != bl->type || cl->type != dl->type)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (long(ta == CUBLAS_OP_N ? al->rows : al->cols) != m ||
      long(tb == CUBLAS_OP_N ? bl->rows : bl->cols) != k ||
      long(tb == CUBLAS_OP_N ? bl->cols : bl->rows) != n || long(cl->rows) != m ||
      long(cl->cols) != n ||
      !::attnbook_emu::blas::shape_ok(ta, tb, int(m), int(n), int(k), al->ld, bl->ld,
                                      cl->ld) ||
      dl->ld < std::max(1L, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
  ::attnbook_emu::blas::with_types(al->type, dl->type, d->compute, [&](auto* ab,
                                                                      auto* cc,
                                                                      auto* acc) {
    using AB = std::remove_pointer_t<decltype(ab)>;
    using C = std::remove_pointer_t<decltype(cc)>;
    using Acc = std::remove_pointer_t<decltype(acc)>;
    constexpr cudaDataType scale = std::is_same_v<Acc, double> ? CUDA_R_64F
                                   : std::is_same_v<Acc, float>  ? CUDA_R_32F
                                                                 : CUDA_R_16F;
    if (d->scale != scale) return;
    for (int i = 0; i < dl->batches; ++i)
      ::attnbook_emu::blas::lt_gemm<Acc>(
          *d, m, n, k, *static_cast<const Acc*>(alpha),
          static_cast<const AB*>(a) + i * al->stride, al->ld,
          static_cast<const AB*>(b) + i * bl->stride, bl->ld,
          *static_cast<const Acc*>(beta), static_cast<const C*>(c) + i * cl->stride,
          cl->ld, static_cast<C*>(out) + i * dl->stride, dl->ld);
    status = CUBLAS_STATUS_SUCCESS;
  });
  return status;
}
