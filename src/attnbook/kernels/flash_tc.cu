// Chapter 8's tensor-core attention forward, every step of the chapter behind one
// launcher: fp16 or bf16 q, k, v in any [B, H, S, D] layout whose rows start on 16
// bytes, o in the same dtype, lse in fp32. The steps:
//   1 mma.sync; lane-by-lane fragments, P in smem  flash_tc_1_mma.cuh
//   2 ldmatrix for every fragment                  flash_tc_2_3_ldmatrix_swizzle.cuh
//   3 swizzled shared memory                       flash_tc_2_3_ldmatrix_swizzle.cuh
//   4 cp.async double buffering of K and V         flash_tc_4_5_pipeline.cuh
//   5 P in registers; exp2, the scale folded in    flash_tc_4_5_pipeline.cuh
//   6 FlashAttention-2's shape: 32 rows per warp,  flash_tc_6_fa2.cuh
//     addresses hoisted, FFMA + EX2 softmax, split-phase copies, an unmasked loop
#include <algorithm>
#include <type_traits>

#include "flash_tc.h"
#include "flash_tc_6_fa2.cuh"

// Query rows per warp: 16 (one m16 tile) up to step 5, 32 in step 6.
template <int Step>
constexpr int tc_rows_per_warp() {
  return Step == 6 ? 32 : 16;
}

template <class T, int D, int Bc, int Warps>
using TcKernel = void (*)(const T*, const T*, const T*, T*, float*, Layout, Layout,
                          Layout, int, int, int, int, int, float, MaskParams);

template <class T, int D, int Bc, int Warps, int Step>
constexpr TcKernel<T, D, Bc, Warps> tc_kernel() {
  if constexpr (Step == 1)
    return flash_tc_smem_p_kernel<T, D, Bc, Warps, LaneFragments>;
  else if constexpr (Step == 2)
    return flash_tc_smem_p_kernel<T, D, Bc, Warps, LdmatrixFragments<false>>;
  else if constexpr (Step == 3)
    return flash_tc_smem_p_kernel<T, D, Bc, Warps, LdmatrixFragments<true>>;
  else if constexpr (Step <= 5)
    return flash_tc_pipeline_kernel<T, D, Bc, Warps, Step == 5>;
  else
    return flash_tc_fa2_kernel<T, D, Bc, Warps>;
}

template <int D, int Bc, int Warps, int Step>
constexpr int tc_smem_bytes() {
  if constexpr (Step <= 3)
    return smem_p_bytes<D, Bc, Warps>();
  else if constexpr (Step <= 5)
    return pipeline_bytes<D, Bc, Warps, Step == 5>();
  else
    return fa2_bytes<D, Bc, Warps>();
}

// The GPU can run this launch: mma.sync m16n8k8 needs sm_75, bf16 operands sm_80, and
// the shared memory must fit (the opt-in fails past the device's per-block limit).
template <class T>
static TcStatus check_device(const void* kernel, int bytes) {
#if !defined(ATTNBOOK_EMULATOR)
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  const int cc = 10 * major + minor;
  if (cc < 75 || (std::is_same_v<T, __nv_bfloat16> && cc < 80)) return kTcArch;
#endif
  const auto attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  if (bytes > 48 * 1024 &&   // past 48 KB a kernel must opt in
      cudaFuncSetAttribute(kernel, attr, bytes) != cudaSuccess)
    return kTcSharedMemory;
  return kTcLaunched;
}

template <class T, int D, int Br, int Bc, int Step>
static TcStatus launch(const void* q, const void* k, const void* v, void* o, float* lse,
                       const Layout& lq, const Layout& lk, const Layout& lv, int B,
                       int H, int Hkv, int Sq, int Sk, float scale,
                       const MaskParams& mask, cudaStream_t stream) {
  constexpr int Warps = Br / tc_rows_per_warp<Step>();
  static_assert(Warps * tc_rows_per_warp<Step>() == Br, "whole warps of rows");
  constexpr int bytes = tc_smem_bytes<D, Bc, Warps, Step>();
  const auto kernel = tc_kernel<T, D, Bc, Warps, Step>();
  const TcStatus status = check_device<T>(reinterpret_cast<const void*>(kernel), bytes);
  if (status != kTcLaunched) return status;
  const long long BH = (long long)B * H;
  for (long long bh0 = 0; bh0 < BH; bh0 += 65535) {   // gridDim.y is at most 65535
    const dim3 grid((Sq + Br - 1) / Br, unsigned(std::min(BH - bh0, 65535ll)));
    kernel<<<grid, 32 * Warps, bytes, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
        static_cast<T*>(o), lse, lq, lk, lv, int(bh0), H, Hkv, Sq, Sk, scale, mask);
  }
  return kTcLaunched;
}

// bf16: false for fp16. Returns kTcLaunched, or why nothing was launched.
TcStatus flash_tc_forward(bool bf16, int step, const void* q, const void* k,
                          const void* v, void* o, float* lse, const Layout& lq,
                          const Layout& lk, const Layout& lv, int B, int H, int Hkv,
                          int Sq, int Sk, int D, int Br, int Bc, float scale,
                          const MaskParams& mask, cudaStream_t stream) {
#define ATTNBOOK_TC_CONFIG(step_, d, br, bc)                                         \
  if (step == step_ && D == d && Br == br && Bc == bc)                              \
    return (bf16 ? launch<__nv_bfloat16, d, br, bc, step_>                           \
                 : launch<__half, d, br, bc, step_>)(q, k, v, o, lse, lq, lk, lv, B, \
                                                     H, Hkv, Sq, Sk, scale, mask,    \
                                                     stream);
#define ATTNBOOK_TC_STEPS(d, bc)                                                     \
  ATTNBOOK_TC_CONFIG(1, d, 64, bc)                                                   \
  ATTNBOOK_TC_CONFIG(2, d, 64, bc)                                                   \
  ATTNBOOK_TC_CONFIG(3, d, 64, bc)                                                   \
  ATTNBOOK_TC_CONFIG(4, d, 64, bc)                                                   \
  ATTNBOOK_TC_CONFIG(5, d, 64, bc)
  ATTNBOOK_TC_STEPS(64, 64)
  ATTNBOOK_TC_STEPS(128, 32)
  ATTNBOOK_TC_CONFIG(5, 64, 128, 64)   // the tile sweep
  ATTNBOOK_TC_CONFIG(5, 128, 64, 64)
  ATTNBOOK_TC_CONFIG(5, 128, 128, 32)
  ATTNBOOK_TC_CONFIG(6, 64, 128, 128)   // FlashAttention-2's tiles
  ATTNBOOK_TC_CONFIG(6, 128, 128, 64)
#undef ATTNBOOK_TC_STEPS
#undef ATTNBOOK_TC_CONFIG
  return kTcNotCompiled;
}
