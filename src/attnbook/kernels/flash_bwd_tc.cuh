// The pieces of chapter 11's tensor-core backward (FlashAttention-2's Algorithm 2) that
// its steps share: mma.sync m16n8k16 with fp32 accumulators, operands in T (fp16 or
// bf16). No kernel stores anything of size Sq x Sk: the forward left o and the
// log-sum-exp L, and every step recomputes p_ij = exp(s_ij − L_i) in fp32, with
// s_ij = scale·q_i·k_j (+ the mask).
//
// Before either step, delta: D_i = Σ_d dO_id·O_id (minus dL_i when the lse has a
// gradient), in fp32. Eight lanes per row, 16-byte loads: every sector whole.
//
// Masks: a block visits only the tiles its keys (queries) may see (admitted_*_range);
// inside a tile, a key that is masked, past Sk, or a row past Sq or with no admitted
// key (L = -inf) gets p = 0 and ds = 0 exactly, whatever dp is: NaN or inf in a masked
// key's v never reaches dS. NaN and inf in admitted entries propagate.
#pragma once
#include <type_traits>

#include "flash_tc_6_fa2.cuh"


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
