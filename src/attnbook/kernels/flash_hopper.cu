// Chapter 12's Hopper forward, every step of the chapter behind one launcher, with
// chapter 8's arguments (flash_tc.cu). The steps:
//   1 wgmma from shared memory, cp.async double buffering  flash_hopper_1_wgmma.cuh
//   2 TMA loads on mbarriers                               flash_hopper_2_tma.cuh
//   3 a TMA producer warpgroup, two consumers             flash_hopper_3_5_producer.cuh
//   4 the consumers' wgmmas in turns (ping-pong)          flash_hopper_3_5_producer.cuh
//   5 each consumer's Q Kᵀ beside its last tile's P V     flash_hopper_3_5_producer.cuh
// The kernels are sm_90a code: built for anything else they trap, so that nothing runs
// that would leave o unwritten (ops/flash_hopper.py builds them for sm_90a and calls
// them only on an sm_90 GPU or the emulator).
#include <algorithm>
#include <cuda.h>
#include <type_traits>

#include "flash_hopper.h"
#include "flash_hopper_1_wgmma.cuh"
#include "flash_hopper_2_tma.cuh"
#include "flash_hopper_3_5_producer.cuh"

// `launch(grid, bh0)` for each run of at most 65535 batch-heads (gridDim.y's limit),
// after granting the kernel its dynamic shared memory.
template <class Kernel, class Launch>
static TcStatus launch_grid(Kernel kernel, int bytes, long long BH, int Sq, int Br,
                            Launch launch) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           bytes) != cudaSuccess)
    return kTcSharedMemory;
  for (long long bh0 = 0; bh0 < BH; bh0 += 65535)
    launch(dim3((Sq + Br - 1) / Br, unsigned(std::min(BH - bh0, 65535ll))), int(bh0));
  return kTcLaunched;
}

// A TMA tensor map of q, k or v: [B, H, S, D] 16-bit elements at element strides l,
// read in boxes of 64 rows by 64 columns (128 bytes) with the 128-byte swizzle, rows
// past S read as zeros. The driver's function comes through the runtime (the
// extension links no libcuda). A dimension of extent 1 is given a packed stride:
// its own is never used, but the driver checks every stride (a multiple of 16 bytes).
static bool encode_map(CUtensorMap* map, const void* base, bool bf16, const Layout& l,
                       int B, int H, int S, int D) {
  static void* encode = nullptr;
  if (!encode) {
    cudaDriverEntryPointQueryResult found;
#if defined(CUDART_VERSION) && CUDART_VERSION < 12050
    // a toolkit before 12.5 has no ...ByVersion: the driver's default version
    const cudaError_t asked = cudaGetDriverEntryPoint(
        "cuTensorMapEncodeTiled", &encode, cudaEnableDefault, &found);
#else
    const cudaError_t asked = cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &encode, 12000, cudaEnableDefault, &found);
#endif
    if (asked != cudaSuccess || found != cudaDriverEntryPointSuccess) return false;
  }
  const cuuint64_t s = S > 1 ? 2 * l.s : 2 * D, h = H > 1 ? 2 * l.h : s * S,
                   b = B > 1 ? 2 * l.b : h * H;
  const cuuint64_t dim[4] = {cuuint64_t(D), cuuint64_t(S), cuuint64_t(H),
                             cuuint64_t(B)};
  const cuuint64_t stride[3] = {s, h, b};
  const cuuint32_t box[4] = {64, 64, 1, 1}, one[4] = {1, 1, 1, 1};
  return reinterpret_cast<decltype(&cuTensorMapEncodeTiled)>(encode)(
             map,
             bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             4, const_cast<void*>(base), dim, stride, box, one,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <class T, int D>
static TcStatus launch(int step, const void* q, const void* k, const void* v, void* o,
                       float* lse, const Layout& lq, const Layout& lk, const Layout& lv,
                       int B, int H, int Hkv, int Sq, int Sk, float scale,
                       const MaskParams& mask, cudaStream_t stream) {
  constexpr int Br = 64, Bc = 64, bytes = hopper_bytes<D, Bc>();
  const long long BH = (long long)B * H;
  T* out = static_cast<T*>(o);
  if (step == 1) {
    const auto kernel = flash_hopper_wgmma_kernel<T, D, Bc>;
    return launch_grid(kernel, bytes, BH, Sq, Br, [&](dim3 grid, int bh0) {
      kernel<<<grid, 128, bytes, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(k),
          static_cast<const T*>(v), out, lse, lq, lk, lv, bh0, H, Hkv, Sq, Sk, scale,
          mask);
    });
  }
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  CUtensorMap maps[3];
  if (!encode_map(&maps[0], q, bf16, lq, B, H, Sq, D) ||
      !encode_map(&maps[1], k, bf16, lk, B, Hkv, Sk, D) ||
      !encode_map(&maps[2], v, bf16, lv, B, Hkv, Sk, D))
    return kTcTensorMap;
  if (step == 2) {
    const auto kernel = flash_hopper_tma_kernel<T, D, Bc>;
    return launch_grid(kernel, bytes, BH, Sq, Br, [&](dim3 grid, int bh0) {
      kernel<<<grid, 128, bytes, stream>>>(maps[0], maps[1], maps[2], out, lse, bh0, H,
                                           Hkv, Sq, Sk, scale, mask);
    });
  }
  // steps 3 to 5: a block of three warpgroups, 128 query rows; step 5 holds two
  // buffers at once (the tile and the one before), so it gets a third to fill
  const auto ws = [&](auto kernel, int stages) {
    const int bytes = stages == 2 ? hopper_bytes<D, Bc, 2 * Br, 2>()
                                  : hopper_bytes<D, Bc, 2 * Br, 3>();
    return launch_grid(kernel, bytes, BH, Sq, 2 * Br, [&](dim3 grid, int bh0) {
      kernel<<<grid, 384, bytes, stream>>>(maps[0], maps[1], maps[2], out, lse, bh0, H,
                                           Hkv, Sq, Sk, scale, mask);
    });
  };
  if (step == 3) return ws(flash_hopper_ws_kernel<T, D, Bc, 2, 3>, 2);
  if (step == 4) return ws(flash_hopper_ws_kernel<T, D, Bc, 2, 4>, 2);
  return ws(flash_hopper_ws_kernel<T, D, Bc, 3, 5>, 3);
}

TcStatus flash_hopper_forward(bool bf16, int step, const void* q, const void* k,
                              const void* v, void* o, float* lse, const Layout& lq,
                              const Layout& lk, const Layout& lv, int B, int H, int Hkv,
                              int Sq, int Sk, int D, float scale,
                              const MaskParams& mask, cudaStream_t stream) {
  if (step < 1 || step > 5 || (D != 64 && D != 128)) return kTcNotCompiled;
  const auto run = D == 64 ? (bf16 ? launch<__nv_bfloat16, 64> : launch<__half, 64>)
                           : (bf16 ? launch<__nv_bfloat16, 128> : launch<__half, 128>);
  return run(step, q, k, v, o, lse, lq, lk, lv, B, H, Hkv, Sq, Sk, scale, mask, stream);
}
