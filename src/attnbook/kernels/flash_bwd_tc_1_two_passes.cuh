// Step 1 of the tensor-core backward: two passes, dK and dV in one, dQ in another.
//
// dK, dV: a block of Warps warps per Bc = 16·Warps keys of one (batch, kv head); warp w
// owns keys 16w..16w+15, the M dimension of its mma. K and V stay in shared memory;
// the block streams Q and dO tiles of Br rows of every query head of the group (for
// GQA the sum over the group happens in registers) and each warp computes, transposed
// so that its keys are the rows,
//   Sᵀ = K Qᵀ,  dPᵀ = V dOᵀ   (16 x Br each, fp32 fragments)
//   Pᵀ = exp(scale·Sᵀ − L),  dSᵀ = Pᵀ ∘ (dPᵀ − D)
//   dV += Pᵀ dO,  dK += dSᵀ Q   (16 x D each, fp32; × scale at the end)
// The fragment of Pᵀ or dSᵀ is already the A operand of the next mma (rows g and g + 8,
// columns 2t, 2t + 1 of each 8-column slice), so P never goes through shared memory:
// it is rounded to T in registers, as the forward's step 5 does.
// dQ: a block per Br = 16·Warps query rows of one (batch, head), streaming K and V
// tiles of Bc keys as the forward does: S = Q Kᵀ, dP = dO Vᵀ, dS as above, and
// dQ += dS K in fp32 registers (× scale at the end).
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
// chapter 8's step 3), synchronously: no cp.async pipeline. L and D of a lane's rows:
// the dK/dV kernel stages the Q tile's beside it in shared memory (coalesced 4-byte
// loads); the dQ kernel's lanes load their own two rows' from global memory at each
// key tile (L1 serves the repeats).
// Writes: dq, dk, dv once each, 4 bytes per lane and row, as T.
#pragma once
#include "flash_bwd_tc.cuh"

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
