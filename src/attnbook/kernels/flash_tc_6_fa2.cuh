// Step 6: FlashAttention-2's shape, built to issue few instructions per mma.
//
// Steps 3-5 spend 13-17 instructions beside each HMMA (the H200's counters,
// bench/results/counters): addresses recomputed for every ldmatrix and cp.async, a
// compare-and-select max, exp guarded by tests, and only 16 rows per warp, so every K
// and V fragment feeds 2 mma. This kernel keeps the mathematics of step 5 and changes
// how it is issued:
// - 32 query rows per warp (two m16 tiles): each K and V fragment feeds 4 mma, so
//   ldmatrix falls from 0.6 to 0.31 per mma. Br = 128 with 4 warps.
// - Addresses once per thread: K and V have one buffer each, at fixed places, so every
//   ldmatrix address is a register set before the loop plus a constant (SwizzledRows),
//   and every cp.async one a pointer advanced by a tile per iteration.
// - The softmax in log2 units with the scale folded in: p = 2^(s·c − m) is one FFMA
//   and one MUFU.EX2 (ex2.approx.ftz), c = scale·log2(e); the row max is FMNMX on the
//   raw scores (c ≥ 0: a negative scale flips the sign of Q once instead); the row
//   sums are an mma of P with a column of ones, not an FADD per score.
// - FlashAttention-2's split-phase copies: V of this tile streams in during S = Q Kᵀ
//   and the softmax, K of the next tile during O += P V; two barriers per tile.
// - Tiles that need no mask run in a loop of their own, with no mask code at all. A
//   tile whose only mask is the causal one (the diagonal of a plain causal mask) costs
//   a compare and a select per score; key lengths, windows, strides, additive masks
//   and partial tiles take the general path, which evaluates every rule per score
//   (the H200 ran step 6's first version, where the diagonal took that path too, at
//   0.32x FlashAttention-2's speed causal at S = 1024, 0.81x without the mask).
//
// NaN and inf: fmaxf drops a NaN from the max, but the NaN score's own p = 2^NaN is
// NaN, which reaches the row's sum and every output column through P V, so the row
// is NaN as in PyTorch; a +inf score makes p = 2^(inf − inf) = NaN the same way.
#pragma once
#include "flash_tc_4_5_pipeline.cuh"

// 2^x by the special-function unit (MUFU.EX2; subnormal results flush to 0).
__device__ __forceinline__ float exp2_approx(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// Byte offsets of one lane's ldmatrix rows in a swizzled [rows][W] tile (W ≥ 64, see
// tile_offset). The lane reads row `row` + r0 at 16-byte chunk k0 / 8 + `chunk`, stored
// at chunk (k0 / 8 + chunk) XOR (row & 7) when r0 is a multiple of 8. With k0 a
// multiple of 16 that is (k0 / 8) XOR x for x = chunk XOR (row & 7): only k0 / 8 mod 8
// ∈ {0, 2, 4, 6} varies the XOR, so four offsets cover every k0 and the rest of the
// address is a constant the compiler folds into the instruction.
template <int W>
struct SwizzledRows {
  static_assert(W % 64 == 0, "a row spans all eight 16-byte bank groups");
  uint32_t off[4];

  __device__ SwizzledRows(int row, int chunk) {
    const int x = chunk ^ (row & 7);
#pragma unroll
    for (int i = 0; i < 4; ++i) off[i] = 2 * (row * W + 8 * ((2 * i) ^ x));
  }
  // Bytes from the tile's start to the lane's row r0 + row at column k0 + 8·chunk.
  __device__ __forceinline__ uint32_t at(int r0, int k0) const {
    return off[k0 / 16 % 4] + 2 * (r0 * W + k0 / 64 * 64);
  }
};

template <int N, bool Trans = false>
__device__ __forceinline__ void ldmatrix_at(uint32_t* r, const uint16_t* tile,
                                            uint32_t bytes) {
  ldmatrix<N, Trans>(r, reinterpret_cast<const char*>(tile) + bytes);
}

// One thread's share of copying a [Rows][W] tile into swizzled shared memory (as
// load_tile, by cp.async): the same 16-byte column chunk of every kRowsPerPass-th row,
// so its shared offset is set once (the swizzle depends on row & 7, the same in every
// pass) and its global address advances by kRowsPerPass rows per pass.
template <int Rows, int W, int Threads>
struct TileCopy {
  static constexpr int kChunks = W / 8, kRowsPerPass = Threads / kChunks;
  static constexpr int kPasses = Rows / kRowsPerPass;
  static_assert(Threads % kChunks == 0 && Rows % kRowsPerPass == 0 &&
                    kRowsPerPass % 8 == 0,
                "every thread copies one column of chunks, at one swizzle");
  int row, col;   // the first row this thread copies, and its column (elements)
  uint32_t dst;   // bytes from the tile's start to that chunk

  __device__ explicit TileCopy(int tid) : row(tid / kChunks), col(tid % kChunks * 8) {
    dst = 2 * tile_offset<W, true>(row, col);
  }
  // Rows [0, Rows) of g (row r at g + r·ld elements) into s; rows from `valid` on are
  // zero when Checked (without, every row must be valid: no test per chunk).
  template <bool Checked, class T>
  __device__ __forceinline__ void issue(uint16_t* s, const T* g, long long ld,
                                        int valid) const {
    const T* from = g + row * ld + col;
    char* to = reinterpret_cast<char*>(s) + dst;
#pragma unroll
    for (int p = 0; p < kPasses; ++p, from += kRowsPerPass * ld) {
      char* d = to + 2 * p * kRowsPerPass * W;
      if (Checked && row + p * kRowsPerPass >= valid)
        *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
      else
        cp_async_16(d, from);
    }
  }
};

// The online softmax of online_softmax in log2 units, the scale folded in: s holds
// raw scores to be multiplied by c (the unmasked tiles: c = scale·log2(e) ≥ 0, so the
// max of the raw scores times c is the max of the scaled ones) or scores already in
// log2 units (masked tiles: c = 1). m is kept in log2 units; p = 2^(s·c − m) in place.
// The row sums are not added here (an mma of P with ones adds them, see the kernel):
// l, rescaled by α like acc, is either the sums of rows g and g + 8 (NL = 2) or the
// accumulator fragment of P·1 itself (NL = 4: each row's sum twice).
template <int NB, int ND, int NL>
__device__ __forceinline__ void online_softmax_exp2(float (&s)[NB][4],
                                                    float (&acc)[ND][4],
                                                    float (&m)[2], float (&l)[NL],
                                                    float c) {
  static_assert(NL == 2 || NL == 4, "l: two row sums or an accumulator fragment");
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = fmaxf(s[0][2 * r], s[0][2 * r + 1]);
#pragma unroll
    for (int n = 1; n < NB; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, 2));
    const float m_new = fmaxf(m[r], mx * c);
    const float base = m_new == -INFINITY ? 0.f : m_new;   // 2^(-inf − 0) = 0, not NaN
    const float alpha = exp2_approx(m[r] - base);
#pragma unroll
    for (int n = 0; n < NB; ++n) {
      s[n][2 * r] = exp2_approx(fmaf(s[n][2 * r], c, -base));
      s[n][2 * r + 1] = exp2_approx(fmaf(s[n][2 * r + 1], c, -base));
    }
#pragma unroll
    for (int i = 0; i < NL / 2; ++i) l[NL / 2 * r + i] *= alpha;
#pragma unroll
    for (int d = 0; d < ND; ++d) {
      acc[d][2 * r] *= alpha;
      acc[d][2 * r + 1] *= alpha;
    }
    m[r] = m_new;
  }
}

// A masked tile's scores in log2 units (scale_and_mask's masked case): -inf where the
// key is not admitted or past the end, scale·s + the additive mask otherwise. The
// additive mask is read through one pointer per row, advanced by constants: computed
// per score from its four strides, its registers would spill.
template <int NB>
__device__ __forceinline__ void mask_scores(float (&s)[NB][4], const MaskParams& mask,
                                            int b, int h, int row0, int j0, int Sq,
                                            int Sk, float scale, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + lane / 4 + 8 * r;
    const float* bias = bias_at(mask, b, h, row, j0 + 2 * (lane % 4));
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = j0 + 8 * n + 2 * (lane % 4) + e;
        float& x = s[n][2 * r + e];
        if (row < Sq && j < Sk && admitted(mask, b, row, j, Sq, Sk))
          x = (bias ? add_bias(x * scale, bias[(8 * n + e) * mask.bs3]) : x * scale) *
              kLog2e;
        else
          x = -INFINITY;
      }
  }
}

// A tile's scores in log2 units when its only mask is the causal one (every key of
// the tile exists and no other rule reaches it, tile_causal_only): key j of row i is
// admitted when j <= i + Sk − Sq, one integer compare against a constant per score,
// since j − j0 − 2·(lane % 4) is the constant 8n + e. Rows past Sq are computed and
// never stored.
template <int NB>
__device__ __forceinline__ void causal_scores(float (&s)[NB][4], bool causal, int row0,
                                              int j0, int Sq, int Sk, float c,
                                              int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int last = causal ? row0 + lane / 4 + 8 * r + Sk - Sq - j0 - 2 * (lane % 4)
                            : 8 * NB;   // the last admitted 8n + e
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[n][2 * r + e];
        x = 8 * n + e <= last ? x * c : -INFINITY;
      }
  }
}

// A masked tile's scores into log2 units: by one compare per score where the causal
// mask is the tile's only rule (causal_only: tile_causal_only), else by every rule.
template <int NB>
__device__ __forceinline__ void masked_scores(float (&s)[NB][4], bool causal_only,
                                              const MaskParams& mask, int b, int h,
                                              int row0, int j0, int Sq, int Sk,
                                              float scale, float c, int lane) {
  if (causal_only)
    causal_scores(s, mask.causal, row0, j0, Sq, Sk, c, lane);
  else
    mask_scores(s, mask, b, h, row0, j0, Sq, Sk, scale, lane);
}

// Dynamic shared memory: Q [Br][D], K [Bc][D] and V [Bc][D], 16-bit each.
template <int D, int Bc, int Warps>
constexpr int fa2_bytes() {
  return 2 * (32 * Warps + 2 * Bc) * D;
}

// Grid and arguments as step 1's kernel, with Br = 32·Warps rows per block.
template <class T, int D, int Bc, int Warps>
__global__ void __launch_bounds__(32 * Warps)
    flash_tc_fa2_kernel(const T* __restrict__ q, const T* __restrict__ k,
                        const T* __restrict__ v, T* __restrict__ o,
                        float* __restrict__ lse, Layout lq, Layout lk, Layout lv,
                        int bh0, int H, int Hkv, int Sq, int Sk, float scale,
                        MaskParams mask) {
  constexpr int Br = 32 * Warps, Threads = 32 * Warps, NB = Bc / 8, ND = D / 8;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t *Qs = smem, *Ks = Qs + Br * D, *Vs = Ks + Bc * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  const T* kb = k + b * lk.b + hk * lk.h;
  const T* vb = v + b * lv.b + hk * lv.h;
  const uint16_t* Qw = Qs + 32 * warp * D;   // this warp's 32 rows

  int kv_begin, kv_end, u_begin, u_end;   // the same for the whole block
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  unmasked_tiles(mask, b, row_lo, row_hi, Sq, Sk, kv_begin, kv_end, Bc, &u_begin,
                 &u_end);
  // The unmasked loop prefetches the next K tile unchecked: a tile whose successor
  // is the partial last one leaves it for the masked loop.
  if (u_end < kv_end && kv_end - u_end < Bc) u_end = max(u_begin, u_end - Bc);

  const TileCopy<Br, D, Threads> copy_q(threadIdx.x);
  const TileCopy<Bc, D, Threads> copy_kv(threadIdx.x);
  copy_q.template issue<true>(Qs, q + b * lq.b + h * lq.h + row_lo * lq.s, lq.s,
                              Sq - row_lo);
  if (kv_begin < kv_end)
    copy_kv.template issue<true>(Ks, kb + kv_begin * lk.s, lk.s, kv_end - kv_begin);
  cp_async_commit();
  if (scale < 0.f) {   // (−q)·k·|scale|: then the max of the raw scores is the max
    cp_async_wait<0>();
    __syncthreads();
    uint32_t* pairs = reinterpret_cast<uint32_t*>(Qs);
    for (int i = threadIdx.x; i < Br * D / 2; i += Threads) pairs[i] ^= 0x80008000u;
    scale = -scale;   // the first tile's barrier orders these stores before any read
  }
  const float c = scale * kLog2e;

  // The lanes' rows for ldmatrix: Q (the A operand) and V (B, transposed) name rows
  // 0-15 at the first 8 columns and the same rows 8 columns on; K (B) rows 0-7 and
  // 8-15 at both, so that each mma's two B registers come out as a pair.
  const SwizzledRows<D> a_rows(lane % 16, lane / 16);
  const SwizzledRows<D> k_rows(lane % 8 + lane / 16 * 8, lane / 8 % 2);
  float acc[2][ND][4] = {}, m[2][2], l[2][2] = {};
#pragma unroll
  for (int t = 0; t < 2; ++t) m[t][0] = m[t][1] = -INFINITY;

  // One key tile [j0, j0 + Bc). Masked: the tile may be partial and need the mask,
  // by one compare per score where the causal one is its only rule (a branch of the
  // same code: a third copy of the tile raised the register pressure until the hot
  // loop spilled).
  auto tile = [&](int j0, auto masked) {
    constexpr bool Masked = decltype(masked)::value;
    const bool causal_only = Masked && tile_causal_only(mask, b, j0 + Bc, Sk);
    cp_async_wait<0>();   // this thread's copies of K (and Q) have landed
    __syncthreads();      // everyone's; and every warp is done with V's buffer
    copy_kv.template issue<Masked>(Vs, vb + j0 * lv.s, lv.s, kv_end - j0);
    cp_async_commit();    // V streams in during S = Q Kᵀ and the softmax

    // S = Q Kᵀ, each K fragment used by both row tiles.
    float s[2][NB][4] = {};
#pragma unroll
    for (int k0 = 0; k0 < D; k0 += 16) {
      uint32_t a[2][4];
#pragma unroll
      for (int t = 0; t < 2; ++t) ldmatrix_at<4>(a[t], Qw, a_rows.at(16 * t, k0));
#pragma unroll
      for (int n0 = 0; n0 < Bc; n0 += 16) {
        uint32_t bk[4];
        ldmatrix_at<4>(bk, Ks, k_rows.at(n0, k0));
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          mma16816<T>(s[t][n0 / 8], a[t], bk);
          mma16816<T>(s[t][n0 / 8 + 1], a[t], bk + 2);
        }
      }
    }
    // P = 2^(S·c − m), packed to T at once: the A operand of P V, half the registers.
    uint32_t p[2][Bc / 16][4];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      if constexpr (Masked)
        masked_scores(s[t], causal_only, mask, b, h, row_lo + 32 * warp + 16 * t, j0,
                      Sq, Sk, scale, c, lane);
      online_softmax_exp2(s[t], acc[t], m[t], l[t], Masked ? 1.f : c);
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        const float *lo = s[t][2 * kk], *hi = s[t][2 * kk + 1];
        p[t][kk][0] = pack2<T>(lo[0], lo[1]);
        p[t][kk][1] = pack2<T>(lo[2], lo[3]);
        p[t][kk][2] = pack2<T>(hi[0], hi[1]);
        p[t][kk][3] = pack2<T>(hi[2], hi[3]);
      }
    }

    // The row sums on the tensor cores: P·1, each column the sum of a row of P as
    // rounded to T (the weights P V uses), one mma per 16 keys instead of an FADD per
    // score, into a fragment of its own: l keeps the two sums of a row tile, not the
    // four registers of a fragment (four fewer across the loop, where 255 are tight).
    constexpr uint32_t one = std::is_same_v<T, __half> ? 0x3c003c00u : 0x3f803f80u;
    const uint32_t ones[2] = {one, one};
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      float sums[4] = {};
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) mma16816<T>(sums, p[t][kk], ones);
      l[t][0] += sums[0];
      l[t][1] += sums[2];
    }

    cp_async_wait<0>();   // this thread's copies of V have landed
    __syncthreads();      // everyone's; and every warp is done with K's buffer
    const int next = j0 + Bc;
    if (next < kv_end)    // K of the next tile streams in during O += P V
      copy_kv.template issue<Masked>(Ks, kb + next * lk.s, lk.s, kv_end - next);
    cp_async_commit();

#pragma unroll
    for (int k0 = 0; k0 < Bc; k0 += 16)
#pragma unroll
      for (int n0 = 0; n0 < D; n0 += 16) {
        uint32_t bv[4];
        ldmatrix_at<4, true>(bv, Vs, a_rows.at(k0, n0));
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          mma16816<T>(acc[t][n0 / 8], p[t][k0 / 16], bv);
          mma16816<T>(acc[t][n0 / 8 + 1], p[t][k0 / 16], bv + 2);
        }
      }
  };

  for (int j0 = kv_begin; j0 < kv_end;) {
    if (j0 >= u_begin && j0 < u_end) {
      for (; j0 < u_end; j0 += Bc) tile(j0, std::false_type{});   // the hot loop
    } else {
      tile(j0, std::true_type{});
      j0 += Bc;
    }
  }
  cp_async_wait<0>();   // no copy outlives the block
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    store_rows<T, ND, true, false>(acc[t], m[t], l[t], o + size_t(bh) * Sq * D,
                                   lse + size_t(bh) * Sq, row_lo + 32 * warp + 16 * t,
                                   Sq, lane);
  }
}
