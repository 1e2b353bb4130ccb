// Step 2 of chapter 7's fused fp32 forward: register tiles. Step 1 gives each thread a
// whole query row, so every FMA of q·kᵀ and p·v waits on a shared-memory load of its
// own and the row's 2·D floats of state crowd the registers. Here the block's 256
// threads share a Br x Bc = 64 x 64 tile of scores as a 16 x 16 grid of 4 x 4 tiles, as
// chapter 4's register-blocked GEMM shares C:
//
//   thread t = 16·ty + tx owns rows 4ty..4ty+3 of the query tile, keys 4tx..4tx+3 of
//   the score tile S, and columns VW·(tx + 16n) .. + VW - 1 (n < NV) of the output.
//
// Per head dimension d, one float4 of Qᵀ (4 rows) and one float4 of Kᵀ (4 keys) from
// shared memory feed 16 FMAs; per key j, one float4 of Pᵀ and NV vectors of V feed
// 4·D/16: at least 8 FMAs per shared-memory load (D ≥ 64).
//
// Shared memory, in floats: Qᵀ [D][Br] (q·scale, loaded once), Pᵀ [Bc][Br], and one
// staging buffer X that holds K in chunks of 32 head dimensions ([32][Bc], transposed)
// and then V in chunks of 32 keys ([32][D]): 40 KB at D = 64, 64 KB at D = 128. The
// registers decide the occupancy: a thread's 16 scores, 4·D/16 outputs and 8 softmax
// statistics, with operands and addresses, take about 120 registers, so two blocks
// (16 warps, 25%) share an SM; __launch_bounds__ holds ptxas to that, without spills.
// The transposed arrays are XOR-swizzled (swizzled()): the transposing stores and the
// float4 reads both hit 32 distinct banks.
//
// Global traffic: Q once, K and V once per query tile, O once, all in 16-byte loads and
// stores by consecutive threads.
//
// The online softmax of a row spans the 16 threads of a half-warp (same ty): the tile's
// row max is a max over 4 scores and 4 shuffles; the running sum l stays a per-thread
// partial sum (every thread of the row rescales by the same factor) until the end,
// where 4 more shuffles add it up. Invariant after each tile, as in step 1: acc = Σ_j
// exp(s_j − m) v_j over the keys seen, l = Σ_j exp(s_j − m), m their largest score.
//
// NaN and inf as step 1: a NaN or +inf score makes its row NaN (max_nan, and exp(inf −
// inf) = NaN), as in SDPA; a masked score is −inf, whatever the key's k, and its
// weight is written to Pᵀ as −0. A V chunk that holds NaN or inf (the barrier after
// staging tells every thread) is accumulated, in a tile with masked elements, by a
// guarded loop in which such a weight adds nothing, not even 0·v; every other chunk
// takes the plain loop of FMAs.
#pragma once
#include "mask.cuh"
#include "max_nan.cuh"

constexpr int kRtBr = 64, kRtBc = 64;   // query and key tile
constexpr int kRtThreads = 256;         // a 16 x 16 grid of 4 x 4 tiles
constexpr int kRtChunk = 32;            // head dims of K, keys of V, per staging

// Shared memory of a block, in bytes.
template <int D>
constexpr int regtile_smem_bytes() {
  return 4 * (D * kRtBr + kRtBc * kRtBr + kRtChunk * (D > kRtBc ? D : kRtBc));
}

// Element (a, b) of a shared [A][N] array whose rows keep their 16-byte groups in an
// order permuted by the row: group g of row a lies at g ^ (a/4 mod 8). Four rows a with
// one a/4 and eight groups with distinct g mod 8 fill 32 distinct banks (N a multiple
// of 32), and a float4 at b = 4g stays one aligned float4.
template <int N>
__device__ __forceinline__ int swizzled(int a, int b) {
  return a * N + 4 * ((b >> 2) ^ ((a >> 2) & 7)) + (b & 3);
}

// dst [W][R] (swizzled) = the transpose of R rows x W floats of src (row stride ld;
// rows >= rows are zeros), times mul. A warp reads 4 rows x 32 floats: 16 sectors of
// 512 bytes; lane l stores the 4 floats of group l % 8 of row l / 8 to 32 banks.
template <int R, int W>
__device__ __forceinline__ void load_transposed(float* dst, const float* src,
                                                long long ld, int rows, float mul) {
  static_assert(R % 32 == 0 && R * W / 4 % kRtThreads == 0, "whole passes");
  const int lane = threadIdx.x % 8, r0 = threadIdx.x / 8 % 32;
#pragma unroll
  for (int pass = 0; pass < R * W / 4 / kRtThreads; ++pass) {
    const int r = r0 + 32 * (pass % (R / 32)), g = 8 * (pass / (R / 32)) + lane;
    const float4 x = r < rows
                         ? *reinterpret_cast<const float4*>(src + r * ld + 4 * g)
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    dst[swizzled<R>(4 * g, r)] = x.x * mul;
    dst[swizzled<R>(4 * g + 1, r)] = x.y * mul;
    dst[swizzled<R>(4 * g + 2, r)] = x.z * mul;
    dst[swizzled<R>(4 * g + 3, r)] = x.w * mul;
  }
}

// s [4][4] = this thread's scores of the tile: (Q·scale) Kᵀ for query rows 4ty.. and
// keys 4tx.. of Qᵀ [D][Br] (shared) and the tile's keys [keys][D] at kt (row stride
// ld; keys past `keys` are zeros), K staged through X [KC][Bc] KC head dims at a time.
// Per head dim, a float4 of Qᵀ and one of Kᵀ feed 16 FMAs. Every thread calls it: its
// barriers also complete what the block stored before.
template <int D, int KC>
__device__ __forceinline__ void tile_scores(float (&s)[4][4], const float* Qt, float* X,
                                            const float* kt, long long ld, int keys,
                                            int ty, int tx) {
  for (int d0 = 0; d0 < D; d0 += KC) {
    load_transposed<kRtBc, KC>(X, kt + d0, ld, keys, 1.f);
    __syncthreads();   // the chunk (and, the first time, Qᵀ) is complete
#pragma unroll 4
    for (int d = 0; d < KC; ++d) {
      const float4 a =
          *reinterpret_cast<const float4*>(Qt + swizzled<kRtBr>(d0 + d, 4 * ty));
      const float4 c = *reinterpret_cast<const float4*>(X + swizzled<kRtBc>(d, 4 * tx));
      const float qa[4] = {a.x, a.y, a.z, a.w}, kc[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) s[i][jj] = fmaf(qa[i], kc[jj], s[i][jj]);
    }
    __syncthreads();   // all are done with the chunk before X is refilled
  }
}

// VW consecutive floats as one load: float4 or float2.
template <int VW>
struct Vec;
template <>
struct Vec<4> {
  using type = float4;
};
template <>
struct Vec<2> {
  using type = float2;
};
template <int VW>
__device__ __forceinline__ void load_vec(const float* p, float* out) {
  const auto x = *reinterpret_cast<const typename Vec<VW>::type*>(p);
  out[0] = x.x;
  out[1] = x.y;
  if constexpr (VW == 4) {
    out[2] = x.z;
    out[3] = x.w;
  }
}
template <int VW>
__device__ __forceinline__ void store_vec(float* p, const float* in) {
  if constexpr (VW == 4)
    *reinterpret_cast<float4*>(p) = make_float4(in[0], in[1], in[2], in[3]);
  else
    *reinterpret_cast<float2*>(p) = make_float2(in[0], in[1]);
}

// acc [4][NV·VW] += Pᵀ[j0 + j][rows] · V[j][columns] for the 32 keys of a V chunk.
// Guarded (a chunk with NaN or inf in v, in a tile with masked elements): a weight of
// −0, a masked key's, adds nothing, not even 0·v.
template <int D, int VW, int NV, bool Guarded>
__device__ __forceinline__ void accumulate_pv(float (&acc)[4][NV * VW], const float* Pt,
                                              const float* Vc, int j0, int ty, int tx) {
#pragma unroll(Guarded ? 1 : 4)
  for (int j = 0; j < kRtChunk; ++j) {
    const float4 p4 =
        *reinterpret_cast<const float4*>(Pt + swizzled<kRtBr>(j0 + j, 4 * ty));
    const float p[4] = {p4.x, p4.y, p4.z, p4.w};
    float v[NV * VW];
#pragma unroll
    for (int n = 0; n < NV; ++n)
      load_vec<VW>(Vc + j * D + VW * (tx + 16 * n), v + n * VW);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool masked = Guarded && __float_as_uint(p[i]) == 0x80000000u;
#pragma unroll
      for (int c = 0; c < NV * VW; ++c)
        acc[i][c] = masked ? acc[i][c] : fmaf(p[i], v[c], acc[i][c]);
    }
  }
}

// q [B, H, Sq, D], k and v [B, Hkv, Sk, D] (strides lq, lk, lv; rows on 16 bytes),
// o contiguous [B, H, Sq, D], lse [B, H, Sq]. Grid (ceil(Sq / 64), B·H pairs from bh0),
// 256 threads, regtile_smem_bytes<D>() of dynamic shared memory. D: 32, 64, 96 or 128.
template <int D>
__global__ void __launch_bounds__(kRtThreads, 2)
    flash_fwd_fp32_regtile_kernel(const float* __restrict__ q,
                                  const float* __restrict__ k,
                                  const float* __restrict__ v, float* __restrict__ o,
                                  float* __restrict__ lse, Layout lq, Layout lk,
                                  Layout lv, int bh0, int H, int Hkv, int Sq, int Sk,
                                  float scale, MaskParams mask) {
  static_assert(D % kRtChunk == 0 && D <= 128, "D: 32, 64, 96 or 128");
  constexpr int Br = kRtBr, Bc = kRtBc;
  constexpr int VW = D % 64 == 0 ? 4 : 2;   // output columns per vector
  constexpr int NV = D / 16 / VW;           // vectors per row of a thread's output
  extern __shared__ float4 smem[];          // float4: 16-byte aligned
  float* Qt = reinterpret_cast<float*>(smem);   // [D][Br]
  float* Pt = Qt + D * Br;                      // [Bc][Br]
  float* X = Pt + Bc * Br;                      // K chunk [32][Bc] or V chunk [32][D]
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  const float* kb = k + b * lk.b + hk * lk.h;
  const float* vb = v + b * lv.b + hk * lv.h;

  load_transposed<Br, D>(Qt, q + b * lq.b + h * lq.h + row_lo * lq.s, lq.s,
                         row_hi - row_lo + 1, scale);
  float acc[4][NV * VW] = {}, m[4], l[4] = {};
#pragma unroll
  for (int i = 0; i < 4; ++i) m[i] = -INFINITY;

  int kv_begin, kv_end;   // the same for every thread of the block: the barriers match
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  for (int j0 = kv_begin; j0 < kv_end; j0 += Bc) {
    // S = (Q·scale) Kᵀ, K staged through X 32 head dims at a time.
    float s[4][4] = {};
    tile_scores<D, kRtChunk>(s, Qt, X, kb + j0 * lk.s, lk.s, min(Bc, Sk - j0), ty, tx);

    // Mask, then the online softmax of each of the thread's 4 rows.
    const bool guarded = !tile_unmasked(mask, b, row_lo, row_hi, j0, j0 + Bc, Sq, Sk);
#pragma unroll
    for (int i = 0; i < 4; ++i) {   // s becomes p, in place
      const int row = row_lo + 4 * ty + i;
      float mx = -INFINITY;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int j = j0 + 4 * tx + jj;
        if (guarded)
          s[i][jj] = row < Sq && j < Sk ? masked_score(mask, s[i][jj], b, h, row, j,
                                                       Sq, Sk)
                                        : -INFINITY;
        mx = max_nan(mx, s[i][jj]);
      }
#pragma unroll
      for (int lanes = 8; lanes > 0; lanes /= 2)   // the row's 16 threads
        mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, lanes));
      const float m_new = max_nan(m[i], mx);
      const float base = m_new == -INFINITY ? 0.f : m_new;   // no key yet: p = 0
      const float alpha = __expf(m[i] - base);               // 0 on the first key
      m[i] = m_new;
      l[i] *= alpha;
#pragma unroll
      for (int c = 0; c < NV * VW; ++c) acc[i][c] *= alpha;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        s[i][jj] = s[i][jj] == -INFINITY ? -0.f : __expf(s[i][jj] - base);
        l[i] += s[i][jj];
      }
    }
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)   // Pᵀ row 4tx + jj, this thread's 4 rows
      *reinterpret_cast<float4*>(Pt + swizzled<Br>(4 * tx + jj, 4 * ty)) =
          make_float4(s[0][jj], s[1][jj], s[2][jj], s[3][jj]);

    // O += P V, V staged through X 32 keys at a time.
    for (int c0 = 0; c0 < Bc; c0 += kRtChunk) {
      bool odd = false;   // NaN or inf among the values this thread staged
      for (int idx = threadIdx.x; idx < kRtChunk * D / 4; idx += kRtThreads) {
        const int r = idx / (D / 4), key = j0 + c0 + r, col = 4 * (idx % (D / 4));
        const float4 x = key < Sk
                             ? *reinterpret_cast<const float4*>(vb + key * lv.s + col)
                             : make_float4(0.f, 0.f, 0.f, 0.f);
        odd |= !isfinite(x.x + x.y + x.z + x.w);
        *reinterpret_cast<float4*>(X + r * D + col) = x;
      }
      // The chunk (and, the first time, Pᵀ) is complete; every thread learns whether
      // some v of it is NaN or inf.
      if (__syncthreads_or(odd) && guarded)
        accumulate_pv<D, VW, NV, true>(acc, Pt, X, c0, ty, tx);
      else
        accumulate_pv<D, VW, NV, false>(acc, Pt, X, c0, ty, tx);
      __syncthreads();   // all are done with X (and Pᵀ) before they are refilled
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int lanes = 8; lanes > 0; lanes /= 2)
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], lanes);
    const int row = row_lo + 4 * ty + i;
    if (row >= Sq) continue;
    const float inv = l[i] == 0.f ? 0.f : 1.f / l[i];   // no admitted key: zeros
    float out[NV * VW];
#pragma unroll
    for (int c = 0; c < NV * VW; ++c) out[c] = acc[i][c] * inv;
    float* orow = o + (size_t(bh) * Sq + row) * D;
#pragma unroll
    for (int n = 0; n < NV; ++n) store_vec<VW>(orow + VW * (tx + 16 * n), out + n * VW);
    if (tx == 0)
      lse[size_t(bh) * Sq + row] = l[i] == 0.f ? -INFINITY : m[i] + logf(l[i]);
  }
}
