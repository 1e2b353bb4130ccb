// Chapter 12's Hopper forward, every step of the chapter behind one launcher, with
// chapter 8's arguments (flash_tc.cu). The steps:
//   1 wgmma from shared memory, cp.async double buffering  flash_hopper_1_wgmma.cuh
// The kernels are sm_90a code: built for anything else they trap, so that nothing runs
// that would leave o unwritten (ops/flash_hopper.py builds them for sm_90a and calls
// them only on an sm_90 GPU or the emulator).
#include <algorithm>
#include <type_traits>

#include "flash_hopper.h"
#include "flash_hopper_1_wgmma.cuh"

template <class T, int D>
static TcStatus launch(const void* q, const void* k, const void* v, void* o, float* lse,
                       const Layout& lq, const Layout& lk, const Layout& lv, int B,
                       int H, int Hkv, int Sq, int Sk, float scale,
                       const MaskParams& mask, cudaStream_t stream) {
  constexpr int Br = 64, Bc = 64, bytes = hopper_bytes<D, Bc>();
  const auto kernel = flash_hopper_wgmma_kernel<T, D, Bc>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           bytes) != cudaSuccess)
    return kTcSharedMemory;
  const long long BH = (long long)B * H;
  for (long long bh0 = 0; bh0 < BH; bh0 += 65535) {   // gridDim.y is at most 65535
    const dim3 grid((Sq + Br - 1) / Br, unsigned(std::min(BH - bh0, 65535ll)));
    kernel<<<grid, 128, bytes, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
        static_cast<T*>(o), lse, lq, lk, lv, int(bh0), H, Hkv, Sq, Sk, scale, mask);
  }
  return kTcLaunched;
}

TcStatus flash_hopper_forward(bool bf16, int step, const void* q, const void* k,
                              const void* v, void* o, float* lse, const Layout& lq,
                              const Layout& lk, const Layout& lv, int B, int H, int Hkv,
                              int Sq, int Sk, int D, float scale,
                              const MaskParams& mask, cudaStream_t stream) {
#define ATTNBOOK_HOPPER_CONFIG(step_, d)                                              \
  if (step == step_ && D == d)                                                       \
    return (bf16 ? launch<__nv_bfloat16, d> : launch<__half, d>)(                     \
        q, k, v, o, lse, lq, lk, lv, B, H, Hkv, Sq, Sk, scale, mask, stream);
  ATTNBOOK_HOPPER_CONFIG(1, 64)
  ATTNBOOK_HOPPER_CONFIG(1, 128)
#undef ATTNBOOK_HOPPER_CONFIG
  return kTcNotCompiled;
}
