// The host side of chapter 11's tensor-core backward: its steps' launches
// (flash_bwd_tc.cuh and the step files say what the kernels do).
#include <algorithm>

#include "flash_bwd_tc.h"
#include "flash_bwd_tc_1_two_passes.cuh"
#include "flash_bwd_tc_2_fa2.cuh"

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

// Step 2's tiles: 8 warps, so Bc = 128 keys a block, and query tiles of Br = 64 rows
// (FlashAttention-2's at D = 128; at D = 64 its query tiles are 128). Shared memory:
// 81 KB at D = 64, 145 KB at D = 128: past 48 KB by opt-in, which sm_75's 64 KB a
// block refuses.
constexpr int kFa2Warps = 8, kFa2Br = 64, kFa2Bc = 16 * kFa2Warps;

// Step 2's dQ slots, `slots` if positive (a test, a sweep), else the fewest that finish
// the grid first. A block fills an SM (255 registers x 256 threads), so s slots run in
// ceil(s·B·Hkv / SMs) waves, each block visiting ceil(key blocks / s) key blocks: the
// time is their product. One block per SM rounded up would leave a tail: at B·Hkv = 32
// on 132 SMs, 5 slots make 160 blocks, a second wave of 28 behind the first, where 4
// slots finish in one wave of 8 key blocks each. At most 512 MiB of slots.
size_t flash_bwd_tc_workspace(int step, int* slots, int B, int H, int Hkv, int Sq,
                              int Sk, int D) {
  if (step != 2 || Sq == 0 || Sk == 0) return *slots = 0;
  const size_t per_slot = size_t(B) * H * ((Sq + kFa2Br - 1) / kFa2Br * kFa2Br) * D;
  const long long key_blocks = (Sk + kFa2Bc - 1) / kFa2Bc, heads = (long long)B * Hkv;
  long long n = *slots;
  if (n <= 0) {
    int device = 0, sms = 1;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    const long long most = std::max(1ll, std::min(
        key_blocks, (512ll << 20) / (4 * (long long)per_slot)));
    long long best = 0;
    for (long long s = 1; s <= most; ++s) {
      const long long time = (s * heads + sms - 1) / sms * ((key_blocks + s - 1) / s);
      if (n <= 0 || time < best) n = s, best = time;
    }
  }
  *slots = int(std::min(n, key_blocks));
  return *slots * per_slot;
}

// Step 1's two passes for one dtype and head dim, in launches of at most 65535 heads
// (gridDim.y's limit). Shared memory stays within 48 KB: no opt-in.
template <class T, int D, int KvBr, int QBc>
static void launch_two_passes(const BwdTcArgs<T>& a, int B, cudaStream_t stream) {
  constexpr int Warps = 4;
  constexpr int kv_bytes = bwd_tc_bytes<D, 16 * Warps + KvBr, KvBr>();
  constexpr int q_bytes = bwd_tc_bytes<D, 16 * Warps + QBc, 0>();
  static_assert(kv_bytes <= 48 * 1024 && q_bytes <= 48 * 1024, "needs an opt-in");
  const long long BH = (long long)B * a.H, BHkv = (long long)B * a.Hkv;
  constexpr int keys = 16 * Warps, block_rows = 16 * Warps;
  for (long long bh0 = 0; bh0 < BHkv; bh0 += 65535) {
    const dim3 grid((a.Sk + keys - 1) / keys, unsigned(std::min(BHkv - bh0, 65535ll)));
    flash_bwd_tc_dkdv_kernel<T, D, KvBr, Warps>
        <<<grid, 32 * Warps, kv_bytes, stream>>>(a, int(bh0));
  }
  for (long long bh0 = 0; bh0 < BH; bh0 += 65535) {
    const dim3 grid((a.Sq + block_rows - 1) / block_rows,
                    unsigned(std::min(BH - bh0, 65535ll)));
    flash_bwd_tc_dq_kernel<T, D, QBc, Warps>
        <<<grid, 32 * Warps, q_bytes, stream>>>(a, int(bh0));
  }
}

// Step 2: the fused kernel over slots x (B·Hkv), then the sum of the slots into dq.
template <class T, int D>
static void launch_fa2(const BwdTcArgs<T>& a, float* dq_slots, int slots, int B,
                       cudaStream_t stream) {
  constexpr int bytes = bwd_fa2_bytes<D, kFa2Br, kFa2Warps>();
  const int sq_pad = (a.Sq + kFa2Br - 1) / kFa2Br * kFa2Br;
  const size_t slot_floats = size_t(B) * a.H * sq_pad * D;
  const long long BHkv = (long long)B * a.Hkv;
  for (long long bh0 = 0; bh0 < BHkv; bh0 += 65535) {
    const dim3 grid(slots, unsigned(std::min(BHkv - bh0, 65535ll)));
    flash_bwd_tc_fa2_kernel<T, D, kFa2Br, kFa2Warps>
        <<<grid, 32 * kFa2Warps, bytes, stream>>>(a, dq_slots, slot_floats, slots,
                                                  sq_pad, int(bh0));
  }
  const long long quads = (long long)B * a.H * a.Sq * D / 4;
  flash_bwd_tc_dq_sum_kernel<T><<<unsigned((quads + 255) / 256), 256, 0, stream>>>(
      dq_slots, a.dq, quads, a.Sq, sq_pad, D, slot_floats, slots, a.scale);
}

template <class T, int D, int KvBr, int QBc>
static TcStatus launch(int step, const BwdTcArgs<T>& a, const T* o, const float* dlse,
                       float* delta, float* dq_slots, int slots, int B,
                       cudaStream_t stream) {
  if (!tensor_cores_for<T>()) return kTcArch;
  if (step == 2) {   // past 48 KB a kernel must opt in
    const auto kernel = flash_bwd_tc_fa2_kernel<T, D, kFa2Br, kFa2Warps>;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             bwd_fa2_bytes<D, kFa2Br, kFa2Warps>()) != cudaSuccess)
      return kTcSharedMemory;
  }
  const long long rows = (long long)B * a.H * a.Sq;
  flash_bwd_tc_delta_kernel<T><<<unsigned((rows * kDeltaGroup + 255) / 256), 256, 0,
                                 stream>>>(o, a.dout, dlse, delta, rows, D);
  if (step == 2)
    launch_fa2<T, D>(a, dq_slots, slots, B, stream);
  else
    launch_two_passes<T, D, KvBr, QBc>(a, B, stream);
  return kTcLaunched;
}

// Step 1 per D: dK/dV blocks of 64 keys (4 warps) over query tiles of 32 rows (D = 64)
// or 16 (D = 128); dQ blocks of 64 rows (4 warps) over key tiles of 32. Shared memory:
// 24 KB (both kernels) at D = 64, 40 KB (dK/dV) and 48 KB (dQ) at D = 128, plus L and
// D of the Q tile in the dK/dV kernel (256 or 128 bytes). Smaller tiles keep a
// thread's fragments (dK and dV: D/2 floats each; Sᵀ and dPᵀ: Br/4 each) in
// registers: with __launch_bounds__(128, 1) ptxas takes what it needs (at most 234 at
// D = 128, sm_75) and spills nothing; without the 1, it squeezed to 168 and spilled.
TcStatus flash_bwd_tc(bool bf16, int step, const void* q, const void* k, const void* v,
                      const void* o, const void* dout, const float* lse,
                      const float* dlse, float* delta, float* dq_slots, int slots,
                      void* dq, void* dk, void* dv, int B, int H, int Hkv, int Sq,
                      int Sk, int D, float scale, const MaskParams& mask,
                      cudaStream_t stream) {
  if (step != 1 && step != 2) return kTcNotCompiled;
#define ATTNBOOK_BWD_TC_CONFIG(T, d, kv_br, q_bc)                                     \
  if (D == d)                                                                         \
    return launch<T, d, kv_br, q_bc>(                                                 \
        step,                                                                         \
        BwdTcArgs<T>{static_cast<const T*>(q), static_cast<const T*>(k),              \
                     static_cast<const T*>(v), static_cast<const T*>(dout), lse,      \
                     delta, static_cast<T*>(dq), static_cast<T*>(dk),                 \
                     static_cast<T*>(dv), H, Hkv, Sq, Sk, scale, mask},               \
        static_cast<const T*>(o), dlse, delta, dq_slots, slots, B, stream);
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
