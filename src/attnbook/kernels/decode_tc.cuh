// Decoding on tensor cores, for bandwidth: the last step of chapter 9.
//
// decode_kernel (decode.cu) gives each lane one key and each warp one query head of
// the G = H / Hkv that share a kv head: every warp re-reads the whole tile, and the
// values go through a serial loop per key. The H200 measured it at 9% of its memory
// bandwidth at B 16, L 32768, where it issued about 345 warp instructions per key.
// This kernel reads each key and value once per kv head and spends about 22 warp
// instructions on it (its sm_90 loop: 33 HMMA and 324 others per 16 keys), so that
// the memory, not the issue, sets the time:
// - The G·Sq query rows of a kv head (≤ 16) are the M dimension of mma.m16n8k16
//   (FlashAttention's "query heads as rows", seqlenq_ngroups_swapped): one mma scores
//   8 keys against every row at 16 of d. Rows past G·Sq are zeros, computed and never
//   stored: the tensor cores have cycles to spare, the memory does not.
// - Q's fragments stay in registers for the whole run (D / 16 ldmatrix.x4 once).
// - The four warps split the block's keys: warp w takes tiles of 16 keys w, w + 4, …,
//   each through its own two-stage ring of cp.async copies (tile t + 1 streams in
//   while t is computed), with no barrier between warps until the end, where the four
//   partial states (m, ℓ, acc) merge through shared memory (chapter 3's merge).
// - Each lane copies 16-byte chunks, the chunks of a key row on consecutive lanes; a
//   tile's page is found once (pages of a multiple of 16 positions), for K and V.
// - The softmax in log2 units with the scale folded in, the row sums as an mma of P
//   with ones (step 6's online_softmax_exp2).
// Keys past the split's end are zeros in shared memory and score −inf: they take no
// part, not even as 0·v. The launcher takes this kernel only where every row admits
// every key below the length (Sq = 1, or no causal mask), fp16/bf16, D = 64 or 128,
// 16-byte aligned caches, sm_80 or newer (cp.async, bf16 mma); decode_kernel serves
// the rest.
#pragma once
#include "flash_tc_6_fa2.cuh"
#include "kv_cache.cuh"

constexpr int kTcDecodeWarps = 4;
constexpr int kTcDecodeKeys = 16;   // keys per tile of one warp
constexpr int kTcDecodeRows = 16;   // query rows per block: the mma's M

// Dynamic shared memory: Q [16][D], then per warp two stages of K [16][D] and V
// [16][D], 16-bit each; at the end the same bytes hold the warps' states (floats).
template <int D>
constexpr int decode_tc_bytes() {
  constexpr int ring = 2 * (kTcDecodeRows + kTcDecodeWarps * 2 * 2 * kTcDecodeKeys) * D;
  constexpr int merge = 4 * kTcDecodeWarps * kTcDecodeRows * (D + 8 + 3);
  return ring > merge ? ring : merge;
}

// Arguments as decode_kernel's (decode.cu), less `wide` (always) and `causal` (the
// launcher has checked that it masks nothing below the length). Grid: (num_splits,
// B·Hkv pairs, row groups of 16).
template <class T, int D>
__global__ void __launch_bounds__(32 * kTcDecodeWarps)
    decode_tc_kernel(const T* __restrict__ q, Layout lq, const T* __restrict__ k_cache,
                     const T* __restrict__ v_cache, KVCache cache,
                     const int* __restrict__ cache_seqlens, int new_keys,
                     T* __restrict__ o, float* __restrict__ o_part,
                     float* __restrict__ lse, int pair0, int B, int H, int Hkv, int Sq,
                     float scale) {
  constexpr int ND = D / 8, kChunks = D / 8, kRowsPerPass = 32 / kChunks;
  constexpr int kPasses = kTcDecodeKeys / kRowsPerPass, kTile = kTcDecodeKeys * D;
  extern __shared__ __align__(128) uint16_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint16_t* Qs = smem;
  uint16_t* ring = Qs + kTcDecodeRows * D + warp * 4 * kTile;   // K0 V0 K1 V1
  const int pair = pair0 + blockIdx.y, b = pair / Hkv, hk = pair % Hkv, G = H / Hkv;
  const int row0 = blockIdx.z * kTcDecodeRows;
  const int rows = min(kTcDecodeRows, G * Sq - row0);

  // This split's keys, in whole groups of four tiles (one per warp).
  constexpr int kGroup = kTcDecodeWarps * kTcDecodeKeys;
  int k_begin, k_end;
  split_keys(cache, cache_seqlens, new_keys, b, kGroup, &k_begin, &k_end);

  // Q rows into shared memory (swizzled, T), times the sign of the scale: row r is
  // query r % Sq of head hk·G + r / Sq; rows past G·Sq are zeros. Element loads: q
  // is small and may be any view.
  const uint16_t sign = scale < 0.f ? 0x8000u : 0u;
  for (int idx = threadIdx.x; idx < kTcDecodeRows * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    uint16_t bits = 0;
    if (r < rows) {
      const int h = hk * G + (row0 + r) / Sq, i = (row0 + r) % Sq;
      const T x = q[b * lq.b + h * lq.h + i * lq.s + d];
      bits = *reinterpret_cast<const uint16_t*>(&x) ^ sign;
    }
    Qs[tile_offset<D, true>(r, d)] = bits;
  }
  const float c = fabsf(scale) * kLog2e;

  // A tile copy in passes: pass p moves key row p·kRowsPerPass + lane / kChunks of
  // the tile, its 16-byte chunk lane % kChunks, for K and V alike; the lane's shared
  // offsets are set once (the swizzle changes from pass to pass). A tile starts on a
  // multiple of 16 keys, so where pages hold a multiple of 16 positions (or the cache
  // is contiguous) it lies in one page: one lookup of the block table per tile (the
  // same word for every lane) and a pointer advanced by constants; only the last tile
  // tests its keys against the end. Pages of other sizes look up each key.
  const int copy_row = lane / kChunks, copy_col = lane % kChunks * 8;
  uint32_t at[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p)
    at[p] = tile_offset<D, true>(p * kRowsPerPass + copy_row, copy_col);
  const bool whole_pages = !cache.block_table || cache.block_size % kTcDecodeKeys == 0;
  auto issue = [&](int j0, uint16_t* ks) {
    uint16_t* vs = ks + kTile;
    if (whole_pages) {
      int page = b, slot = j0;
      if (cache.block_table) {
        page = cache.block_table[b * cache.table_stride + j0 / cache.block_size];
        slot = j0 % cache.block_size;
      }
      const T* kp = k_cache + kv_offset(cache.k, page, hk, slot + copy_row) + copy_col;
      const T* vp = v_cache + kv_offset(cache.v, page, hk, slot + copy_row) + copy_col;
      const long long k_step = kRowsPerPass * cache.k.s;
      const long long v_step = kRowsPerPass * cache.v.s;
      const int last = page < 0 || page >= cache.num_pages ? -1 : k_end - j0 - copy_row;
      if (last >= kTcDecodeKeys) {   // every tile but the last: no test at all
#pragma unroll
        for (int p = 0; p < kPasses; ++p, kp += k_step, vp += v_step) {
          cp_async_16(ks + at[p], kp);
          cp_async_16(vs + at[p], vp);
        }
      } else {
#pragma unroll
        for (int p = 0; p < kPasses; ++p, kp += k_step, vp += v_step) {
          if (p * kRowsPerPass < last) {
            cp_async_16(ks + at[p], kp);
            cp_async_16(vs + at[p], vp);
          } else {   // past the keys (or a page outside the pool): zeros, 0·v is 0
            *reinterpret_cast<uint4*>(ks + at[p]) = make_uint4(0, 0, 0, 0);
            *reinterpret_cast<uint4*>(vs + at[p]) = make_uint4(0, 0, 0, 0);
          }
        }
      }
    } else {
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        const int row = p * kRowsPerPass + copy_row;
        int page, slot;
        if (j0 + row < k_end && kv_slot(cache, b, j0 + row, &page, &slot)) {
          const int c = copy_col;
          cp_async_16(ks + at[p], k_cache + kv_offset(cache.k, page, hk, slot) + c);
          cp_async_16(vs + at[p], v_cache + kv_offset(cache.v, page, hk, slot) + c);
        } else {
          *reinterpret_cast<uint4*>(ks + at[p]) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(vs + at[p]) = make_uint4(0, 0, 0, 0);
        }
      }
    }
    cp_async_commit();
  };

  const int first = k_begin + warp * kTcDecodeKeys;   // this warp's tiles: first,
  if (first < k_end) issue(first, ring);                // first + 64, …
  __syncthreads();   // Q is in shared memory

  const SwizzledRows<D> a_rows(lane % 16, lane / 16);
  const SwizzledRows<D> k_rows(lane % 8 + lane / 16 * 8, lane / 8 % 2);
  uint32_t qa[D / 16][4];   // Q's A fragments, the whole run
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) ldmatrix_at<4>(qa[kk], Qs, a_rows.at(0, 16 * kk));

  // l: the row sums of P as rounded to T, by mma (what O's weights sum to, so that o
  // divides by it); l32 this lane's share of the fp32 sums, for the log-sum-exp.
  float acc[ND][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[4] = {}, l32[2] = {};
  constexpr uint32_t one = std::is_same_v<T, __half> ? 0x3c003c00u : 0x3f803f80u;
  const uint32_t ones[2] = {one, one};
  int stage = 0;
  for (int j0 = first; j0 < k_end; j0 += kGroup, stage ^= 1) {
    uint16_t* ks = ring + stage * 2 * kTile;
    uint16_t* vs = ks + kTile;
    if (j0 + kGroup < k_end)
      issue(j0 + kGroup, ring + (stage ^ 1) * 2 * kTile);   // streams in meanwhile
    else
      cp_async_commit();   // an empty group: the wait below stays "all but one"
    cp_async_wait<1>();    // this lane's copies of tile j0 have landed
    __syncwarp();          // and every lane's

    // S = Q Kᵀ for 16 keys: two n-tiles of 8 keys, D / 16 steps of k.
    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t bk[4];
      ldmatrix_at<4>(bk, ks, k_rows.at(0, 16 * kk));
      mma16816<T>(s[0], qa[kk], bk);
      mma16816<T>(s[1], qa[kk], bk + 2);
    }
    const bool tail = j0 + kTcDecodeKeys > k_end;   // the same for the whole warp
    if (tail) {   // keys past the end: −inf, the rest into log2 units
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[n][e] = j0 + 8 * n + 2 * (lane % 4) + e % 2 < k_end ? s[n][e] * c
                                                                : -INFINITY;
    }
    const float m_old[2] = {m[0], m[1]};
    online_softmax_exp2(s, acc, m, l, tail ? 1.f : c);
#pragma unroll
    for (int r = 0; r < 2; ++r)   // rescaled as online_softmax_exp2 rescales l
      l32[r] = l32[r] * exp2_approx(m_old[r] - (m[r] == -INFINITY ? 0.f : m[r])) +
               (s[0][2 * r] + s[0][2 * r + 1] + s[1][2 * r] + s[1][2 * r + 1]);
    const uint32_t p[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]),
                           pack2<T>(s[1][0], s[1][1]), pack2<T>(s[1][2], s[1][3])};
    mma16816<T>(l, p, ones);   // the row sums of P as rounded to T
#pragma unroll
    for (int n0 = 0; n0 < D; n0 += 16) {   // O += P V
      uint32_t bv[4];
      ldmatrix_at<4, true>(bv, vs, a_rows.at(0, n0));
      mma16816<T>(acc[n0 / 8], p, bv);
      mma16816<T>(acc[n0 / 8 + 1], p, bv + 2);
    }
    __syncwarp();   // every lane is done with this stage before it is refilled
  }
  cp_async_wait<0>();
  __syncthreads();   // every warp is done with the ring: it becomes the merge area

  // The warps' states: row g = lane / 4 (and g + 8) of warp w, unnormalized.
#pragma unroll
  for (int r = 0; r < 2; ++r) {   // the four lanes of a row hold its columns
    l32[r] += __shfl_xor_sync(kFullWarp, l32[r], 1);
    l32[r] += __shfl_xor_sync(kFullWarp, l32[r], 2);
  }
  // acc's rows are kRowPad floats apart: a warp's float2 stores of rows g = 0..7 and
  // columns 2·(lane % 4) then fill the 32 banks without conflict in each half-warp.
  constexpr int kStates = kTcDecodeWarps * kTcDecodeRows, kRowPad = D + 8;
  float* ms = reinterpret_cast<float*>(smem);   // [warps][16] each
  float* ls = ms + kStates;
  float* l32s = ls + kStates;
  float* accs = l32s + kStates;                 // [warps][16][kRowPad]
  const int g = lane / 4;
  if (lane % 4 == 0) {
    ms[warp * 16 + g] = m[0], ms[warp * 16 + g + 8] = m[1];
    ls[warp * 16 + g] = l[0], ls[warp * 16 + g + 8] = l[2];
    l32s[warp * 16 + g] = l32[0], l32s[warp * 16 + g + 8] = l32[1];
  }
#pragma unroll
  for (int n = 0; n < ND; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h)   // rows g and g + 8
      *reinterpret_cast<float2*>(accs + (warp * 16 + g + 8 * h) * kRowPad + 8 * n +
                                 2 * (lane % 4)) =
          make_float2(acc[n][2 * h], acc[n][2 * h + 1]);
  __syncthreads();

  // Merge (log2 units): M = max_w m_w, ℓ = Σ_w 2^(m_w − M) ℓ_w, the same weights on
  // acc; o = acc / ℓ, lse = (M + log2 ℓ)·ln 2. A warp whose m is −inf saw no finite
  // score: weight 0, so its ℓ and acc add 0, or NaN where it saw a NaN score (whose
  // fmaxf left m at −inf); a row with M = −inf sums them as they are: zeros and −inf
  // for a row no warp saw a key of, NaN for one that saw only NaN.
  const long long n_rows = (long long)B * H * Sq;
  for (int idx = threadIdx.x; idx < rows * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kTcDecodeWarps; ++w) M = fmaxf(M, ms[w * 16 + r]);
    float sum = 0.f, sum32 = 0.f, out = 0.f;
#pragma unroll
    for (int w = 0; w < kTcDecodeWarps; ++w) {
      const float mw = ms[w * 16 + r];
      const float wgt = M == -INFINITY ? 1.f : mw == -INFINITY ? 0.f : exp2f(mw - M);
      sum += wgt * ls[w * 16 + r];
      sum32 += wgt * l32s[w * 16 + r];
      out += wgt * accs[(w * 16 + r) * kRowPad + d];
    }
    const long long row = ((long long)b * H + hk * G + (row0 + r) / Sq) * Sq +
                          (row0 + r) % Sq;
    const float value = sum == 0.f ? 0.f : out / sum;
    const float row_lse =
        sum == 0.f ? -INFINITY : (M + log2f(sum32)) * 0.6931471805599453f;
    if (o_part) {
      o_part[(blockIdx.x * n_rows + row) * D + d] = value;
      if (d == 0) lse[blockIdx.x * n_rows + row] = row_lse;
    } else {
      store(o + row * D + d, value);
      if (d == 0) lse[row] = row_lse;
    }
  }
}
