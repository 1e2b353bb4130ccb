// Step 2 of the tensor-core backward: FlashAttention-2's shape, five matrix products
// per tile instead of step 1's seven, and still the same bits on every run.
//
// One block of Warps warps owns Bc = 16·Warps keys of one (batch, kv head) at a time;
// K and V stay in shared memory while the Q and dO tiles of Br rows of every query
// head of the group stream past, double-buffered by cp.async (tile t + 1 lands while
// tile t is computed). Per tile, warp w, whose rows are keys 16w..16w+15:
//   Sᵀ = K Qᵀ, then Pᵀ = 2^(Sᵀ·c − L·log2 e), packed to T at once (c = scale·log2 e)
//   dPᵀ = V dOᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ − D), packed to T and stored to shared memory
//   dV += Pᵀ dO,  dK += dSᵀ Q   (A operands from registers, as step 1)
//   dQ_tile = dS K   (after a barrier: every warp's dSᵀ, the whole Br x Bc block)
// dS is the only Sq x Sk quantity that crosses shared memory; P never does. The dQ
// product splits the Br x D tile over the warps, 16 rows x Dw columns each.
//
// dQ, deterministic without a second pass: a dq_i sums over every key block, so it
// needs an fp32 accumulator in global memory (dq_slots). With atomicAdd from a block
// per key block the order of the additions changes from run to run, and so do dQ's
// last bits. Here the grid is (slots, B·Hkv): block s visits key blocks s, s + slots,
// s + 2·slots, … one after another, and adds its dQ tiles to slot s with plain loads
// and stores. Only block s touches slot s, in a fixed order (key blocks ascending, then
// heads, then query tiles), and each element of a tile belongs to one lane; a small
// kernel then sums the slots in order 0, 1, … and writes dq = scale·Σ as T. The cost
// is the slots' memory, slots·B·H·Sq·D floats, and their traffic: FlashAttention-2's
// deterministic mode pays the same. `slots` is the fewest that finish the grid first
// (flash_bwd_tc_workspace).
//
// Issue: K and V fragments come from shared memory once per k-step and feed Br/8 mma
// each; Q and dO fragments feed 2. Addresses are registers set before the loop plus
// constants (SwizzledRows, chapter 8's step 6); the softmax is one FFMA and one
// MUFU.EX2 per score on tiles without a mask, which run as code of their own. Two
// barriers per tile: the tiles have landed (and the last tile's buffers are free), and
// dSᵀ is complete.
//
// Masks as step 1: a key block visits only the query tiles its keys may see; inside a
// masked tile a masked key, a key past Sk or a row past Sq gets p = 0 and ds = 0
// exactly. At D = 64 a tile whose only rule is the causal one (the diagonal of a
// causal mask) costs a compare and two selects per score, as in chapter 8's step 6;
// the other masked tiles evaluate every rule per score. Rows past Sq in a tile that is
// not masked are zero rows of Q and dO whose L is staged as +inf: p = 2^(−inf) = 0.
#pragma once
#include "flash_bwd_tc.cuh"

// Dynamic shared memory: K, V [Bc][D]; Q, dO [2][Br][D]; dSᵀ [Bc][Br] (16-bit each);
// L and D [2][Br] (float).
template <int D, int Br, int Warps>
constexpr int bwd_fa2_bytes() {
  constexpr int Bc = 16 * Warps;
  return 2 * (2 * Bc * D + 4 * Br * D + Bc * Br) + 4 * 4 * Br;
}

// The warp's raw Sᵀ and dPᵀ (rows: keys row0 + …, columns: queries col0 + …) become
// Pᵀ and dSᵀ, packed two by two as the A operands of dV += Pᵀ dO and dK += dSᵀ Q. L and
// D of the tile's rows: Lt, Dt in shared memory, read where they are used (held for
// the whole tile they would take Br/2 registers). Unmasked: one FFMA and one MUFU.EX2
// per p. Masked: every rule (mask_scores' masked case, transposed), unless the causal
// one is the tile's only rule (tile_causal_only: every key exists): then key j of
// query i is admitted when j − i <= Sk − Sq, one integer compare against a constant per
// score, since j − i − row0 − g + col0 + 2t is the constant 8·(e / 2) − 8n − e % 2.
template <class T, bool Masked, int NB>
__device__ __forceinline__ void probs_and_dscores_packed(
    uint32_t (&pa)[NB / 2][4], uint32_t (&da)[NB / 2][4], float (&s)[NB][4],
    float (&dp)[NB][4], const float* Lt, const float* Dt, float c,
    const MaskParams& mask, bool causal_only, int b, int h, int row0, int col0,
    int Sq, int Sk, float scale, int lane) {
  const int last = mask.causal ? col0 + 2 * (lane % 4) + Sk - Sq - row0 - lane / 4
                               : 8;   // the largest 8·(e / 2) − 8n − e % 2 admitted
#pragma unroll
  for (int n = 0; n < NB; ++n) {
    const float2 L = *reinterpret_cast<const float2*>(Lt + 8 * n + 2 * (lane % 4));
    const float2 Dn = *reinterpret_cast<const float2*>(Dt + 8 * n + 2 * (lane % 4));
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float nl = (e % 2 ? L.y : L.x) * -kLog2e, d = e % 2 ? Dn.y : Dn.x;
      float p;
      if (Masked && causal_only) {
        const bool admitted = 8 * (e / 2) - 8 * n - e % 2 <= last;
        p = admitted ? exp2_approx(fmaf(s[n][e], c, nl)) : 0.f;
        dp[n][e] = admitted ? p * (dp[n][e] - d) : 0.f;
      } else if (Masked) {
        const int j = row0 + lane / 4 + 8 * (e / 2);
        const int i = col0 + 8 * n + 2 * (lane % 4) + e % 2;
        const float m =
            i < Sq && j < Sk ? masked_score(mask, s[n][e] * scale, b, h, i, j, Sq, Sk)
                             : -INFINITY;
        p = m == -INFINITY || nl == INFINITY ? 0.f : exp2_approx(fmaf(m, kLog2e, nl));
        dp[n][e] = p == 0.f ? 0.f : p * (dp[n][e] - d);
      } else {
        p = exp2_approx(fmaf(s[n][e], c, nl));
        dp[n][e] = p * (dp[n][e] - d);
      }
      s[n][e] = p;
    }
  }
#pragma unroll
  for (int kk = 0; kk < NB / 2; ++kk) {
    const float *lo = s[2 * kk], *hi = s[2 * kk + 1];
    const float *dlo = dp[2 * kk], *dhi = dp[2 * kk + 1];
    pa[kk][0] = pack2<T>(lo[0], lo[1]);
    pa[kk][1] = pack2<T>(lo[2], lo[3]);
    pa[kk][2] = pack2<T>(hi[0], hi[1]);
    pa[kk][3] = pack2<T>(hi[2], hi[3]);
    da[kk][0] = pack2<T>(dlo[0], dlo[1]);
    da[kk][1] = pack2<T>(dlo[2], dlo[3]);
    da[kk][2] = pack2<T>(dhi[0], dhi[1]);
    da[kk][3] = pack2<T>(dhi[2], dhi[3]);
  }
}

// Grid: (slots, B·Hkv) from (batch, kv head) bkv0 on; 32·Warps threads. Writes dk and
// dv (keys a block never visits keep the caller's zeros) and adds to dq_slots, float
// [slots, B·H, sq_pad, D] (slot_floats each), zero on entry (sq_pad: Sq rounded up to
// Br).
template <class T, int D, int Br, int Warps>
__global__ void __launch_bounds__(32 * Warps, 1)
    flash_bwd_tc_fa2_kernel(const BwdTcArgs<T> a, float* __restrict__ dq_slots,
                            size_t slot_floats, int slots, int sq_pad, int bkv0) {
  constexpr int Bc = 16 * Warps, Threads = 32 * Warps, NB = Br / 8, ND = D / 8;
  constexpr int RowGroups = Br / 16, Dw = D * RowGroups / Warps;   // dQ: 16 x Dw a warp
  static_assert(Warps % RowGroups == 0 && Dw % 16 == 0, "whole warps of dQ tiles");
  // The diagonal's own path at D = 64 only: at D = 128 its registers, added to the
  // masked tiles' and live beside dK and dV (D floats a lane), spill into the hot loop.
  constexpr bool kCausalTiles = D <= 64;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t *Ks = smem, *Vs = Ks + Bc * D, *Qs = Vs + Bc * D, *dOs = Qs + 2 * Br * D;
  uint16_t* dSs = dOs + 2 * Br * D;                          // dSᵀ [Bc][Br]
  float* Ls = reinterpret_cast<float*>(dSs + Bc * Br);       // L [2][Br]
  float* Ds = Ls + 2 * Br;                                   // D [2][Br]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int H = a.H, Sq = a.Sq, Sk = a.Sk, group = a.H / a.Hkv;
  const int bkv = bkv0 + blockIdx.y, b = bkv / a.Hkv, hk = bkv % a.Hkv;
  const MaskParams& mask = a.mask;
  const float c = a.scale * kLog2e;
  // ldmatrix rows: A operands (K, V) and transposed B operands (dO, Q, K as [k][n])
  // as chapter 8's a_rows; B operands from [n][k] tiles (Q, dO) and the transposed A
  // operand dS from dSᵀ [k][m] as its k_rows.
  const SwizzledRows<D> a_rows(lane % 16, lane / 16);
  const SwizzledRows<D> b_rows(lane % 8 + lane / 16 * 8, lane / 8 % 2);
  const int dq_row = 16 * (warp % RowGroups), dq_col = Dw * (warp / RowGroups);
  const int n_kb = (Sk + Bc - 1) / Bc;

  for (int jb = blockIdx.x; jb < n_kb; jb += slots) {
    const int j0 = jb * Bc;
    int i_begin, i_end;   // block-uniform, as every loop bound below: barriers match
    admitted_query_range(mask, b, j0, min(Sk, j0 + Bc), Sq, Sk, &i_begin, &i_end);
    i_begin = i_begin / Br * Br;   // tiles on multiples of Br: inside sq_pad
    const int q_tiles = (i_end - i_begin + Br - 1) / Br, tiles = group * q_tiles;
    if (i_end <= i_begin) continue;

    // Tile t: query head hk·group + t / q_tiles, rows i0 = i_begin + t % q_tiles · Br.
    // Its copies go to buffer t % 2; L and D of rows past Sq are +inf and 0.
    auto stage = [&](int t) {
      const int h = hk * group + t / q_tiles, i0 = i_begin + t % q_tiles * Br;
      const size_t row = (size_t(b) * H + h) * Sq + i0;
      const int buf = t % 2;
      const TileCopy<Br, D, Threads> copy_q(threadIdx.x);   // a few integer ops
      copy_q.template issue<true>(Qs + buf * Br * D, a.q + row * D, D, Sq - i0);
      copy_q.template issue<true>(dOs + buf * Br * D, a.dout + row * D, D, Sq - i0);
      if (threadIdx.x < Br) {
        float *l = Ls + buf * Br + threadIdx.x, *d = Ds + buf * Br + threadIdx.x;
        if (i0 + int(threadIdx.x) < Sq) {
          cp_async_4(l, a.lse + row + threadIdx.x);
          cp_async_4(d, a.delta + row + threadIdx.x);
        } else {
          *l = INFINITY;
          *d = 0.f;
        }
      }
      cp_async_commit();
    };

    __syncthreads();   // every warp is done with the previous key block's tiles
    const size_t kv = (size_t(bkv) * Sk + j0) * D;
    // Keys past the batch's length are zero rows, as past Sk: never read, a NaN there
    // cannot reach dQ through 0 · NaN.
    const int keys = (mask.key_lengths ? min(Sk, mask.key_lengths[b]) : Sk) - j0;
    const TileCopy<Bc, D, Threads> copy_kv(threadIdx.x);
    copy_kv.template issue<true>(Ks, a.k + kv, D, keys);
    copy_kv.template issue<true>(Vs, a.v + kv, D, keys);
    stage(0);
    float dk[ND][4] = {}, dv[ND][4] = {};

    auto tile = [&](int t, auto masked) {
      constexpr bool Masked = decltype(masked)::value;
      const int h = hk * group + t / q_tiles, i0 = i_begin + t % q_tiles * Br;
      const uint16_t *Qt = Qs + t % 2 * Br * D, *dOt = dOs + t % 2 * Br * D;
      const float *Lt = Ls + t % 2 * Br, *Dt = Ds + t % 2 * Br;
      cp_async_wait<0>();   // this thread's copies of tile t (and K, V) have landed
      __syncthreads();      // everyone's; every warp is done with tile t − 1's dSᵀ
      if (t + 1 < tiles) stage(t + 1);   // into the buffer tile t − 1 used

      // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ: one K (V) fragment per k-step feeds all Br/8 mma
      // of the warp's row; then Pᵀ and dSᵀ, packed.
      uint32_t pa[NB / 2][4], da[NB / 2][4];
      {
        float s[NB][4] = {}, dp[NB][4] = {};
#pragma unroll
        for (int k0 = 0; k0 < D; k0 += 16) {
          uint32_t ka[4], va[4];
          ldmatrix_at<4>(ka, Ks, a_rows.at(16 * warp, k0));
          ldmatrix_at<4>(va, Vs, a_rows.at(16 * warp, k0));
#pragma unroll
          for (int n0 = 0; n0 < Br; n0 += 16) {
            uint32_t qb[4], ob[4];
            ldmatrix_at<4>(qb, Qt, b_rows.at(n0, k0));
            mma16816<T>(s[n0 / 8], ka, qb);
            mma16816<T>(s[n0 / 8 + 1], ka, qb + 2);
            ldmatrix_at<4>(ob, dOt, b_rows.at(n0, k0));
            mma16816<T>(dp[n0 / 8], va, ob);
            mma16816<T>(dp[n0 / 8 + 1], va, ob + 2);
          }
        }
        const bool causal_only =
            Masked && kCausalTiles && tile_causal_only(mask, b, j0 + Bc, Sk);
        probs_and_dscores_packed<T, Masked>(pa, da, s, dp, Lt, Dt, c, mask,
                                            causal_only, b, h, j0 + 16 * warp, i0, Sq,
                                            Sk, a.scale, lane);
      }
      // dSᵀ to shared memory: the lane's pair (rows g, g + 8; columns 8n + 2t, + 1)
      // of each 8-column slice n, one 32-bit store each, conflict-free (swizzled).
      // (Addresses used once a tile are computed where they are used: held across the
      // tile, they would take registers from the products' fragments.)
      // The lane's pair of row 16w + g is in chunk n XOR g of the row.
      char* dSb = reinterpret_cast<char*>(dSs) + 2 * (16 * warp + lane / 4) * Br +
                  4 * (lane % 4);
      const uint32_t ds_xor = 16 * (lane / 4);
#pragma unroll
      for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r)   // row g + 8: 8 rows on, the same swizzle
          *reinterpret_cast<uint32_t*>(dSb + (16 * n ^ ds_xor) + 16 * Br * r) =
              da[n / 2][2 * (n % 2) + r];
      // dV += Pᵀ dO and dK += dSᵀ Q: k runs over the tile's Br queries.
#pragma unroll
      for (int kk = 0; kk < NB / 2; ++kk)
#pragma unroll
        for (int n0 = 0; n0 < D; n0 += 16) {
          uint32_t ob[4], qb[4];
          ldmatrix_at<4, true>(ob, dOt, a_rows.at(16 * kk, n0));
          mma16816<T>(dv[n0 / 8], pa[kk], ob);
          mma16816<T>(dv[n0 / 8 + 1], pa[kk], ob + 2);
          ldmatrix_at<4, true>(qb, Qt, a_rows.at(16 * kk, n0));
          mma16816<T>(dk[n0 / 8], da[kk], qb);
          mma16816<T>(dk[n0 / 8 + 1], da[kk], qb + 2);
        }
      __syncthreads();   // dSᵀ is whole

      // This tile's dQ = dS K, rows dq_row.., columns dq_col.. of the warp, added to
      // slot blockIdx.x: the lane's own elements, read and written by it alone.
      // dQ's operands at the warp's offsets, folded into the rows' chunks (dq_row / 8
      // and dq_col % 64 / 8 share no bit with the chunks the loop adds: Dw is a power
      // of 2); K's rows are a_rows' when dq_col is a multiple of 64.
      const SwizzledRows<Br> ds_rows(lane % 8 + lane / 16 * 8,
                                     lane / 8 % 2 + dq_row / 8);
      const SwizzledRows<D> kq_rows =
          Dw % 64 ? SwizzledRows<D>(lane % 16, lane / 16 + dq_col % 64 / 8) : a_rows;
      const uint16_t* Kq = Ks + dq_col / 64 * 64;
      float dq[Dw / 8][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < Bc; k0 += 16) {
        uint32_t sa[4];
        ldmatrix_at<4, true>(sa, dSs, ds_rows.at(k0, 0));
#pragma unroll
        for (int n0 = 0; n0 < Dw; n0 += 16) {
          uint32_t kb[4];
          ldmatrix_at<4, true>(kb, Kq, kq_rows.at(k0, n0));
          mma16816<T>(dq[n0 / 8], sa, kb);
          mma16816<T>(dq[n0 / 8 + 1], sa, kb + 2);
        }
      }
      float* slot = dq_slots + blockIdx.x * slot_floats +
                    ((size_t(b) * H + h) * sq_pad + i0 + dq_row + lane / 4) * D +
                    dq_col + 2 * (lane % 4);
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int n = 0; n < Dw / 8; ++n) {
          float2* to = reinterpret_cast<float2*>(slot + 8 * r * D + 8 * n);
          const float2 sum = *to;
          *to = make_float2(sum.x + dq[n][2 * r], sum.y + dq[n][2 * r + 1]);
        }
    };

    // Tiles without a mask run in a loop of their own, the hot loop: no mask code.
    auto unmasked = [&](int t) {
      const int i0 = i_begin + t % q_tiles * Br;
      return tile_unmasked(mask, b, i0, min(Sq, i0 + Br) - 1, j0, j0 + Bc, Sq, Sk);
    };
    for (int t = 0; t < tiles;) {
      if (unmasked(t)) {
        for (; t < tiles && unmasked(t); ++t) tile(t, std::false_type{});
      } else {
        tile(t, std::true_type{});
        ++t;
      }
    }
    const size_t first = size_t(bkv) * Sk * D;
    store_fragment<T, D>(dk, a.scale, a.dk + first, j0 + 16 * warp, Sk, lane);
    store_fragment<T, D>(dv, 1.f, a.dv + first, j0 + 16 * warp, Sk, lane);
  }
}

// dq = scale·(slot 0 + slot 1 + … ) as T, in that order: the same bits on every run.
// A thread per 4 elements of dq ([BH, Sq, D], D a multiple of 8); slots: float
// [slots, BH, sq_pad, D], slot_floats each.
template <class T>
__global__ void flash_bwd_tc_dq_sum_kernel(const float* __restrict__ dq_slots,
                                           T* __restrict__ dq, long long quads, int Sq,
                                           int sq_pad, int D, size_t slot_floats,
                                           int slots, float scale) {
  const long long x = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (x >= quads) return;
  const long long e = 4 * x, per_head = (long long)Sq * D;
  const float* from = dq_slots + e / per_head * sq_pad * D + e % per_head;
  float4 sum = *reinterpret_cast<const float4*>(from);
  for (int s = 1; s < slots; ++s) {
    const float4 add = *reinterpret_cast<const float4*>(from + s * slot_floats);
    sum = make_float4(sum.x + add.x, sum.y + add.y, sum.z + add.z, sum.w + add.w);
  }
  *reinterpret_cast<uint2*>(dq + e) = make_uint2(
      pack2<T>(sum.x * scale, sum.y * scale), pack2<T>(sum.z * scale, sum.w * scale));
}
