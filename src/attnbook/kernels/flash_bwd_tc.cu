// The backward pass of chapter 8's tensor-core attention (FlashAttention-2's Algorithm
// 2) for fp16 and bf16: mma.sync m16n8k16 with fp32 accumulators, operands in T, in
// three kernels, none of which stores anything of size Sq x Sk. The forward left o and
// the log-sum-exp L; the kernels recompute p_ij = exp(s_ij − L_i) in fp32, with
// s_ij = scale·q_i·k_j (+ the mask).
//
// 1. delta: D_i = Σ_d dO_id·O_id (minus dL_i when the lse has a gradient), in fp32.
//    Eight lanes per row, 16-byte loads: every sector whole.
// 2. dK, dV: a block of Warps warps per Bc = 16·Warps keys of one (batch, kv head);
//    warp w owns keys 16w..16w+15, the M dimension of its mma. K and V stay in shared
//    memory; the block streams Q and dO tiles of Br rows of every query head of the
//    group (for GQA the sum over the group happens in registers) and each warp
//    computes, transposed so that its keys are the rows,
//      Sᵀ = K Qᵀ,  dPᵀ = V dOᵀ   (16 x Br each, fp32 fragments)
//      Pᵀ = exp(scale·Sᵀ − L),  dSᵀ = Pᵀ ∘ (dPᵀ − D)
//      dV += Pᵀ dO,  dK += dSᵀ Q   (16 x D each, fp32; × scale at the end)
//    The fragment of Pᵀ or dSᵀ is already the A operand of the next mma (rows g and
//    g + 8, columns 2t, 2t + 1 of each 8-column slice), so P never goes through
//    shared memory: it is rounded to T in registers, as the forward's step 5 does.
// 3. dQ: a block per Br = 16·Warps query rows of one (batch, head), streaming K and V
//    tiles of Bc keys as the forward does: S = Q Kᵀ, dP = dO Vᵀ, dS as above, and
//    dQ += dS K in fp32 registers (× scale at the end).
//
// dQ by a separate pass, not by atomics: with a block per key tile, every key block
// adds to every dq_i, and fp32 atomicAdd from many blocks in an order that changes from
// run to run gives a result that changes in its last bits (and needs an fp32 buffer of
// dQ and a conversion pass). The dQ pass recomputes S and dP (7 matrix products in all
// instead of 5, about 40% more tensor-core work) but every element of dQ, dK and dV is
// written once, by one lane, that adds its terms in a fixed order: the result is the
// same bit for bit on every run, and no two blocks ever touch the same address.
//
// Traffic: the dK/dV kernel reads K and V once and Q, dO once per key block and query
// head; the dQ kernel reads Q and dO once and K, V once per query block. Tiles come in
// 16-byte loads per thread into swizzled shared memory (conflict-free ldmatrix,
// chapter 8's step 3), synchronously: no cp.async pipeline yet. L and D of a lane's
// rows: the dK/dV kernel stages the Q tile's beside it in shared memory (coalesced
// 4-byte loads); the dQ kernel's lanes load their own two rows' from global memory at
// each key tile (L1 serves the repeats).
// Writes: dq, dk, dv once each, 4 bytes per lane and row, as T.
//
// Masks: a block visits only the tiles its keys (queries) may see (admitted_*_range);
// inside a tile, a key that is masked, past Sk, or a row past Sq or with no admitted
// key (L = -inf) gets p = 0 and ds = 0 exactly, whatever dp is: NaN or inf in a masked
// key's v never reaches dS. NaN and inf in admitted entries propagate.
#include <algorithm>
#include <type_traits>

#include "flash_bwd_tc.h"
#include "flash_tc_2_3_ldmatrix_swizzle.cuh"

using BwdFragments = LdmatrixFragments<true>;   // ldmatrix from swizzled tiles
constexpr int kDeltaGroup = 8;                  // lanes per row of the delta kernel

// rows: B·H·Sq; o, dout: contiguous [rows, D] of T, 16-byte aligned; dlse: [rows] or
// null. Lane t of a row's group reads 16-byte chunks t, t + 8, …: a warp reads 4 rows.
template <class T>
__global__ void flash_bwd_tc_delta_kernel(const T* __restrict__ o,
                                          const T* __restrict__ dout,
                                          const float* __restrict__ dlse,
                                          float* __restrict__ delta, long long rows,
                                          int D) {
  const long long thread = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long r = thread / kDeltaGroup;
  const int t = threadIdx.x % kDeltaGroup;
  float acc = 0.f;
  for (int c = t; r < rows && c < D / 8; c += kDeltaGroup) {
    const uint4 a = *reinterpret_cast<const uint4*>(o + r * D + 8 * c);
    const uint4 b = *reinterpret_cast<const uint4*>(dout + r * D + 8 * c);
    const T* x = reinterpret_cast<const T*>(&a);
    const T* y = reinterpret_cast<const T*>(&b);
    for (int e = 0; e < 8; ++e)
      acc += static_cast<float>(x[e]) * static_cast<float>(y[e]);
  }
  for (int offset = kDeltaGroup / 2; offset > 0; offset /= 2)   // every lane takes part
    acc += __shfl_xor_sync(kFullWarp, acc, offset);
  if (r < rows && t == 0) delta[r] = dlse ? acc - dlse[r] : acc;
}

// A warp's fragments of raw dot products, s = q·k and dp = dO·v, become P and dS in
// place. KeysAreRows: the fragment's rows are keys row0.. and its columns queries
// col0.. (the dK/dV kernel); otherwise rows are queries and columns keys (dQ). lse and
// delta: L and D of query rows first.. (this (batch, head)'s, past first); read for
// rows below Sq only. `unmasked`: the whole tile is admitted.
template <bool KeysAreRows, int NB>
__device__ __forceinline__ void probs_and_dscores(float (&s)[NB][4], float (&dp)[NB][4],
                                                  bool unmasked, const MaskParams& mask,
                                                  int b, int h, int row0, int col0,
                                                  int Sq, int Sk, float scale,
                                                  const float* lse, const float* delta,
                                                  int first, int lane) {
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + lane / 4 + 8 * (e / 2);
      const int col = col0 + 8 * n + 2 * (lane % 4) + e % 2;
      const int i = KeysAreRows ? col : row, j = KeysAreRows ? row : col;
      float x = s[n][e] * scale;
      if (!unmasked)
        x = i < Sq && j < Sk ? masked_score(mask, x, b, h, i, j, Sq, Sk) : -INFINITY;
      const float L = i < Sq ? lse[i - first] : -INFINITY;
      const float p = x == -INFINITY || L == -INFINITY ? 0.f : exp2f((x - L) * kLog2e);
      s[n][e] = p;
      dp[n][e] = p == 0.f ? 0.f : p * (dp[n][e] - delta[i - first]);
    }
}

// factor·acc, the warp's 16 x D fragment, as T into rows row0.. of out ([rows, D]).
template <class T, int D>
__device__ __forceinline__ void store_fragment(const float (&acc)[D / 8][4],
                                               float factor, T* out, int row0, int rows,
                                               int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + lane / 4 + 8 * r;
    if (row >= rows) continue;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      *reinterpret_cast<uint32_t*>(out + size_t(row) * D + 8 * d + 2 * (lane % 4)) =
          pack2<T>(acc[d][2 * r] * factor, acc[d][2 * r + 1] * factor);
  }
}

// The arguments of the dK/dV and dQ kernels: q, dout [B, H, Sq, D]; k, v
// [B, Hkv, Sk, D]; lse, delta [B, H, Sq]; the outputs dq [B, H, Sq, D], dk and dv
// [B, Hkv, Sk, D]; every tensor contiguous, rows on 16 bytes.
template <class T>
struct BwdTcArgs {
  const T *q, *k, *v, *dout;
  const float *lse, *delta;
  T *dq, *dk, *dv;
  int H, Hkv, Sq, Sk;
  float scale;
  MaskParams mask;
};

// Dynamic shared memory of both kernels: two tiles of each of two heights, Rows in all,
// D 16-bit elements a row (dK/dV: K, V [Bc][D] and Q, dO [Br][D]; dQ: the reverse),
// then L and D of Staged query rows as floats (dK/dV: Br; dQ: none).
template <int D, int Rows, int Staged>
constexpr int bwd_tc_bytes() {
  return 2 * 2 * Rows * D + 2 * 4 * Staged;
}

// Grid: (ceil(Sk / Bc), B·Hkv) from (batch, kv head) bh0 on; 32·Warps threads, Bc =
// 16·Warps keys. Writes dk and dv.
template <class T, int D, int Br, int Warps>
__global__ void __launch_bounds__(32 * Warps, 1)
    flash_bwd_tc_dkdv_kernel(const BwdTcArgs<T> a, int bh0) {
  const T *q = a.q, *k = a.k, *v = a.v, *dout = a.dout;
  const int H = a.H, Hkv = a.Hkv, Sq = a.Sq, Sk = a.Sk;
  const MaskParams& mask = a.mask;
  constexpr int Bc = 16 * Warps, Threads = 32 * Warps;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t *Ks = smem, *Vs = Ks + Bc * D, *Qs = Vs + Bc * D, *dOs = Qs + Br * D;
  float* Ls = reinterpret_cast<float*>(dOs + Br * D);   // L and D of the Q tile's rows
  float* Ds = Ls + Br;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bkv = bh0 + blockIdx.y, b = bkv / Hkv, hk = bkv % Hkv, group = H / Hkv;
  const int j0 = blockIdx.x * Bc;
  const size_t kv = (size_t(bkv) * Sk + j0) * D;   // the block's first key
  load_tile<Bc, D, true, Threads, false>(Ks, k + kv, D, Sk - j0);
  load_tile<Bc, D, true, Threads, false>(Vs, v + kv, D, Sk - j0);

  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};
  int i_begin, i_end;   // the same for the whole block: the barriers match
  admitted_query_range(mask, b, j0, min(Sk, j0 + Bc), Sq, Sk, &i_begin, &i_end);
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const size_t bh = size_t(b) * H + h;
    for (int i0 = i_begin; i0 < i_end; i0 += Br) {
      __syncthreads();   // every warp is done with the previous Q and dO tiles
      load_tile<Br, D, true, Threads, false>(Qs, q + (bh * Sq + i0) * D, D, Sq - i0);
      load_tile<Br, D, true, Threads, false>(dOs, dout + (bh * Sq + i0) * D, D,
                                             Sq - i0);
      for (int r = threadIdx.x; r < Br && i0 + r < Sq; r += Threads) {   // coalesced
        Ls[r] = a.lse[bh * Sq + i0 + r];
        Ds[r] = a.delta[bh * Sq + i0 + r];
      }
      __syncthreads();   // the tiles (and, the first time, K and V) are complete

      float s[Br / 8][4], dp[Br / 8][4];   // Sᵀ and dPᵀ: the warp's keys x Br rows
      warp_scores<T, D, Br, BwdFragments>(s, Ks, Qs, 16 * warp, lane);
      warp_scores<T, D, Br, BwdFragments>(dp, Vs, dOs, 16 * warp, lane);
      const int i_hi = min(Sq, i0 + Br) - 1;
      const bool unmasked = tile_unmasked(mask, b, i0, i_hi, j0, j0 + Bc, Sq, Sk);
      probs_and_dscores<true>(s, dp, unmasked, mask, b, h, j0 + 16 * warp, i0, Sq, Sk,
                              a.scale, Ls, Ds, i0, lane);
      warp_mma_fragment<T, D, Br, BwdFragments>(dv_acc, s, dOs, lane);    // dV += Pᵀ dO
      warp_mma_fragment<T, D, Br, BwdFragments>(dk_acc, dp, Qs, lane);    // dK += dSᵀ Q
    }
  }
  const size_t first = size_t(bkv) * Sk * D;
  store_fragment<T, D>(dk_acc, a.scale, a.dk + first, j0 + 16 * warp, Sk, lane);
  store_fragment<T, D>(dv_acc, 1.f, a.dv + first, j0 + 16 * warp, Sk, lane);
}

// Grid: (ceil(Sq / Br), B·H) from (batch, head) bh0 on; 32·Warps threads, Br =
// 16·Warps rows. Writes dq.
template <class T, int D, int Bc, int Warps>
__global__ void __launch_bounds__(32 * Warps, 1)
    flash_bwd_tc_dq_kernel(const BwdTcArgs<T> a, int bh0) {
  const T *q = a.q, *k = a.k, *v = a.v, *dout = a.dout;
  const int H = a.H, Hkv = a.Hkv, Sq = a.Sq, Sk = a.Sk;
  const MaskParams& mask = a.mask;
  constexpr int Br = 16 * Warps, Threads = 32 * Warps;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t *Qs = smem, *dOs = Qs + Br * D, *Ks = dOs + Br * D, *Vs = Ks + Bc * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  const size_t rows = (size_t(bh) * Sq + row_lo) * D;
  const T* kb = k + size_t(b * Hkv + hk) * Sk * D;
  const T* vb = v + size_t(b * Hkv + hk) * Sk * D;
  load_tile<Br, D, true, Threads, false>(Qs, q + rows, D, Sq - row_lo);
  load_tile<Br, D, true, Threads, false>(dOs, dout + rows, D, Sq - row_lo);

  float acc[D / 8][4] = {};
  int kv_begin, kv_end;   // the same for the whole block: the barriers match
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  for (int j0 = kv_begin; j0 < kv_end; j0 += Bc) {
    __syncthreads();   // every warp is done with the previous K and V tiles
    load_tile<Bc, D, true, Threads, false>(Ks, kb + size_t(j0) * D, D, kv_end - j0);
    load_tile<Bc, D, true, Threads, false>(Vs, vb + size_t(j0) * D, D, kv_end - j0);
    __syncthreads();   // the tiles (and, the first time, Q and dO) are complete

    float s[Bc / 8][4], dp[Bc / 8][4];   // S and dP: the warp's 16 rows x Bc keys
    warp_scores<T, D, Bc, BwdFragments>(s, Qs, Ks, 16 * warp, lane);
    warp_scores<T, D, Bc, BwdFragments>(dp, dOs, Vs, 16 * warp, lane);
    const bool unmasked = tile_unmasked(mask, b, row_lo, row_hi, j0, j0 + Bc, Sq, Sk);
    probs_and_dscores<false>(s, dp, unmasked, mask, b, h, row_lo + 16 * warp, j0, Sq,
                             Sk, a.scale, a.lse + size_t(bh) * Sq,
                             a.delta + size_t(bh) * Sq, 0, lane);
    warp_mma_fragment<T, D, Bc, BwdFragments>(acc, dp, Ks, lane);   // dQ += dS K
  }
  store_fragment<T, D>(acc, a.scale, a.dq + size_t(bh) * Sq * D, row_lo + 16 * warp, Sq,
                       lane);
}

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
