// The host side of chapter 11's tensor-core backward: its steps' launches
// (flash_bwd_tc.cuh and the step files say what the kernels do).
#include <algorithm>

#include "flash_bwd_tc.h"
#include "flash_bwd_tc_1_two_passes.cuh"

// The GPU has the tensor cores for T: mma.sync needs sm_75, bf16 operands sm_80.
template <class T>
static bool tensor_cores_for() {
#if defined(ATTNBOOK_EMULATOR)
  return true;
#else
  int device = 0, cc[2] = {0, 0};
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(cc, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(cc + 1, cudaDevAttrComputeCapabilityMinor, device);
  const int sm = 10 * cc[0] + cc[1];
  return sm >= (std::is_same_v<T, __nv_bfloat16> ? 80 : 75);
#endif
}

// The three kernels for one dtype and head dim, in launches of at most 65535 heads
// (gridDim.y's limit). Shared memory stays within 48 KB: no opt-in.
template <class T, int D, int KvBr, int KvWarps, int QBc, int QWarps>
static TcStatus launch(const BwdTcArgs<T>& a, const T* o, const float* dlse,
                       float* delta, int B, cudaStream_t stream) {
  constexpr int kv_bytes = bwd_tc_bytes<D, 16 * KvWarps + KvBr, KvBr>();
  constexpr int q_bytes = bwd_tc_bytes<D, 16 * QWarps + QBc, 0>();
  static_assert(kv_bytes <= 48 * 1024 && q_bytes <= 48 * 1024, "needs an opt-in");
  if (!tensor_cores_for<T>()) return kTcArch;
  const long long BH = (long long)B * a.H, BHkv = (long long)B * a.Hkv;
  const long long rows = BH * a.Sq;
  flash_bwd_tc_delta_kernel<T><<<unsigned((rows * kDeltaGroup + 255) / 256), 256, 0,
                                 stream>>>(o, a.dout, dlse, delta, rows, D);
  constexpr int keys = 16 * KvWarps, block_rows = 16 * QWarps;
  for (long long bh0 = 0; bh0 < BHkv; bh0 += 65535) {
    const dim3 grid((a.Sk + keys - 1) / keys, unsigned(std::min(BHkv - bh0, 65535ll)));
    flash_bwd_tc_dkdv_kernel<T, D, KvBr, KvWarps>
        <<<grid, 32 * KvWarps, kv_bytes, stream>>>(a, int(bh0));
  }
  for (long long bh0 = 0; bh0 < BH; bh0 += 65535) {
    const dim3 grid((a.Sq + block_rows - 1) / block_rows,
                    unsigned(std::min(BH - bh0, 65535ll)));
    flash_bwd_tc_dq_kernel<T, D, QBc, QWarps>
        <<<grid, 32 * QWarps, q_bytes, stream>>>(a, int(bh0));
  }
  return kTcLaunched;
}

// Per D: dK/dV blocks of 64 keys (4 warps) over query tiles of 32 rows (D = 64) or 16
// (D = 128); dQ blocks of 64 rows (4 warps) over key tiles of 32. Shared memory: 24 KB
// (both kernels) at D = 64, 40 KB (dK/dV) and 48 KB (dQ) at D = 128, plus L and D of
// the Q tile in the dK/dV kernel (256 or 128 bytes). Smaller tiles
// keep a thread's fragments (dK and dV: D/2 floats each; Sᵀ and dPᵀ: Br/4 each) in
// registers: with __launch_bounds__(128, 1) ptxas takes what it needs (at most 234 at
// D = 128, sm_75) and spills nothing; without the 1, it squeezed to 168 and spilled.
TcStatus flash_bwd_tc(bool bf16, const void* q, const void* k, const void* v,
                      const void* o, const void* dout, const float* lse,
                      const float* dlse, float* delta, void* dq, void* dk, void* dv,
                      int B, int H, int Hkv, int Sq, int Sk, int D, float scale,
                      const MaskParams& mask, cudaStream_t stream) {
#define ATTNBOOK_BWD_TC_CONFIG(T, d, kv_br, q_bc)                                     \
  if (D == d)                                                                         \
    return launch<T, d, kv_br, 4, q_bc, 4>(                                           \
        BwdTcArgs<T>{static_cast<const T*>(q), static_cast<const T*>(k),              \
                     static_cast<const T*>(v), static_cast<const T*>(dout), lse,      \
                     delta, static_cast<T*>(dq), static_cast<T*>(dk),                 \
                     static_cast<T*>(dv), H, Hkv, Sq, Sk, scale, mask},               \
        static_cast<const T*>(o), dlse, delta, B, stream);
#define ATTNBOOK_BWD_TC_HEAD_DIMS(T) \
  ATTNBOOK_BWD_TC_CONFIG(T, 64, 32, 32) ATTNBOOK_BWD_TC_CONFIG(T, 128, 16, 32)
  if (bf16) {
    ATTNBOOK_BWD_TC_HEAD_DIMS(__nv_bfloat16)
  } else {
    ATTNBOOK_BWD_TC_HEAD_DIMS(__half)
  }
#undef ATTNBOOK_BWD_TC_HEAD_DIMS
#undef ATTNBOOK_BWD_TC_CONFIG
  return kTcNotCompiled;
}
