// Decoding attention: a few new query rows per sequence (Sq = 1, or up to ~8 when
// speculating) against that sequence's cached keys and values, in fp32, fp16 or bf16
// with fp32 arithmetic. Per (sequence, head) this is a matrix-vector product: each
// cached key and value is used for a handful of multiply-adds, so the kernel is bound
// by how fast it reads the cache, and everything below is about reading it once,
// coalesced, with enough blocks in flight.
//
// Grid: (num_splits, B·Hkv, row groups), in launches of at most 65535 (batch, kv head)
// pairs. A block owns one kv head of one sequence, so the G = H / Hkv query heads that
// share it, times the Sq new queries, are the rows of one block (up to kDecodeRows of
// them; more take further row groups): each K/V element is read from global memory once
// per group of heads, not once per query head.
//
// Split-K (FlashDecoding): the sequence's keys are cut into num_splits chunks of whole
// tiles, one per block along x. With few sequences and heads, this is what fills the
// GPU. A split writes its rows' output, normalized over its own keys, and their
// log-sum-exp; decode_combine_kernel merges the partial states (chapter 3's merge).
// With one split the kernel writes the final output directly.
//
// In a block: 4 warps; each warp owns rows warp, warp + 4, … and keeps their running
// max m, running sum l and output (D / 32 floats per lane) in registers. Keys stream
// through shared memory in tiles of 32, one key per lane: lane j scores key j, the warp
// reduces max and sum with shuffles, then every lane adds the 32 weighted values for
// its D / 32 output elements.
//
// Invariant after each tile, per row: over the keys seen so far, with m their largest
// score, acc = Σ_j exp(s_j − m) v_j and l = Σ_j exp(s_j − m) (chapter 6's online
// softmax). Masked keys (past the sequence's length, or after the query's causal
// position) never take part, not even as 0·v. NaN and inf propagate as in the fused
// kernel (max_nan).
#include <algorithm>
#include <cmath>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "decode.h"
#include "kv_cache.cuh"
#include "layout.h"
#include "max_nan.cuh"
#include "warp_reduce.cuh"

constexpr int kDecodeThreads = 128;   // 4 warps per block
constexpr int kDecodeKeys = 32;       // keys per tile: one per lane
constexpr int kDecodeRows = 32;       // query rows per block (G·Sq of one kv head)

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half(x); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) {
  *p = __float2bfloat16(x);
}

// q: [B, H, Sq, D] (strides lq). cache_seqlens[b] + new_keys keys of sequence b are
// attended (the new ones already appended). Query row i of Sq may attend key j if
// j < L_b and, when causal, j ≤ L_b − Sq + i (bottom-right alignment).
// Output rows are the B·H·Sq rows of [B, H, Sq]: with o_part == nullptr, o and lse get
// the final output and log-sum-exp; otherwise split s writes o_part[s][row][:] and
// lse[s][row].
template <class T, int D>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_kernel(const T* __restrict__ q, Layout lq, const T* __restrict__ k_cache,
                  const T* __restrict__ v_cache, KVCache cache,
                  const int* __restrict__ cache_seqlens, int new_keys,
                  T* __restrict__ o, float* __restrict__ o_part,
                  float* __restrict__ lse, int pair0, int B, int H, int Hkv, int Sq,
                  float scale, bool causal) {
  constexpr int kWarps = kDecodeThreads / 32, kRowsPerWarp = kDecodeRows / kWarps;
  constexpr int kPerLane = D / 32;
  extern __shared__ float smem[];
  const int pair = pair0 + blockIdx.y, b = pair / Hkv, hk = pair % Hkv, G = H / Hkv;
  const int row0 = blockIdx.z * kDecodeRows, rows = min(kDecodeRows, G * Sq - row0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* qs = smem;                      // [rows][D]: the block's queries, times scale
  float* ks = qs + rows * D;             // [kDecodeKeys][D]: a tile of keys
  float* vs = ks + kDecodeKeys * D;      // [kDecodeKeys][D]: and of values

  // This split's keys: the s-th share of the sequence's tiles (per sequence, since the
  // lengths differ). A split with no tile writes an empty state: m = -inf, l = 0.
  const long long L = min(max((long long)cache_seqlens[b] + new_keys, 0ll),
                          (long long)cache.capacity);
  const long long tiles = (L + kDecodeKeys - 1) / kDecodeKeys;
  const long long per_split = (tiles + gridDim.x - 1) / gridDim.x;
  const int k_begin = int(min(L, blockIdx.x * per_split * kDecodeKeys));
  const int k_end = int(min(L, k_begin + per_split * kDecodeKeys));

  // Block row r is query i = r % Sq of head hk·G + r / Sq.
  for (int idx = threadIdx.x; idx < rows * D; idx += kDecodeThreads) {
    const int r = row0 + idx / D, h = hk * G + r / Sq, i = r % Sq;
    qs[idx] = to_float(q[b * lq.b + h * lq.h + i * lq.s + idx % D]) * scale;
  }
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.f;
    for (int c = 0; c < kPerLane; ++c) acc[rr][c] = 0.f;
  }

  for (int j0 = k_begin; j0 < k_end; j0 += kDecodeKeys) {
    // Consecutive threads load consecutive d of a key: coalesced, one page lookup per
    // element (the table is tiny and cached). Keys past k_end are zeros, never read.
    for (int idx = threadIdx.x; idx < kDecodeKeys * D; idx += kDecodeThreads) {
      const int j = j0 + idx / D, d = idx % D;
      int page, slot;
      const bool ok = j < k_end && kv_slot(cache, b, j, &page, &slot);
      ks[idx] = ok ? to_float(k_cache[kv_offset(cache.k, page, hk, slot) + d]) : 0.f;
      vs[idx] = ok ? to_float(v_cache[kv_offset(cache.v, page, hk, slot) + d]) : 0.f;
    }
    __syncthreads();   // the tile (and, the first time, qs) is complete before any read
#pragma unroll   // constant indices keep m, l and acc in registers
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp + rr * kWarps;   // the same for the whole warp: shuffles agree
      if (r >= rows) break;
      const int i = (row0 + r) % Sq, j = j0 + lane;
      const long long last = causal ? L - Sq + i : L - 1;   // the row's last key
      float s = -INFINITY;
      if (j < k_end && j <= last) {
        // Lane j reads row j of the tile starting at column j (mod D): the 32 lanes hit
        // 32 different banks, where reading column d together would hit one bank 32
        // times. (Padding the rows instead would push the block past 48 KB at D = 128.)
        float dot = 0.f;
        for (int d = 0, dd = lane; d < D; ++d, dd = dd + 1 == D ? 0 : dd + 1)
          dot += qs[r * D + dd] * ks[lane * D + dd];
        s = dot;
      }
      const unsigned live = __ballot_sync(0xffffffffu, s != -INFINITY);
      const float m_tile = warp_max(s);
      if (live == 0) continue;   // every key of the tile is masked for this row
      const float m_new = max_nan(m[rr], m_tile);
      const float alpha = __expf(m[rr] - m_new);   // 0 on the row's first live tile
      const float p = s == -INFINITY ? 0.f : __expf(s - m_new);
      l[rr] = l[rr] * alpha + warp_sum(p);
      for (int c = 0; c < kPerLane; ++c) acc[rr][c] *= alpha;
      for (unsigned bits = live; bits; bits &= bits - 1) {   // the live keys only
        const int jj = __ffs(int(bits)) - 1;
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        for (int c = 0; c < kPerLane; ++c)
          acc[rr][c] += pj * vs[jj * D + lane + 32 * c];
      }
      m[rr] = m_new;
    }
    __syncthreads();   // every warp is done with the tile before the next load
  }

  const long long n_rows = (long long)B * H * Sq;
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = row0 + warp + rr * kWarps;
    if (warp + rr * kWarps >= rows) break;
    const long long row = ((long long)b * H + hk * G + r / Sq) * Sq + r % Sq;
    const float inv = l[rr] == 0.f ? 0.f : 1.f / l[rr];   // no key: zeros
    const float row_lse = l[rr] == 0.f ? -INFINITY : m[rr] + logf(l[rr]);
    if (o_part) {
      float* dst = o_part + (blockIdx.x * n_rows + row) * D;
      for (int c = 0; c < kPerLane; ++c) dst[lane + 32 * c] = acc[rr][c] * inv;
      if (lane == 0) lse[blockIdx.x * n_rows + row] = row_lse;
    } else {
      for (int c = 0; c < kPerLane; ++c)
        store(o + row * D + lane + 32 * c, acc[rr][c] * inv);
      if (lane == 0) lse[row] = row_lse;
    }
  }
}

// Merges the num_splits partial states of each row: with lse = log Σ_s exp(lse_s), the
// output is Σ_s exp(lse_s − lse) · o_s. One thread per output element, consecutive
// threads on consecutive d: the o_part reads are coalesced, the lse_s reads of a row
// are shared by its D threads. Traffic: num_splits·(D + 1) floats read per row.
template <class T>
__global__ void decode_combine_kernel(const float* __restrict__ o_part,
                                      const float* __restrict__ lse_part,
                                      T* __restrict__ o, float* __restrict__ lse,
                                      long long n_rows, int D, int num_splits) {
  const long long n = n_rows * D, step = (long long)gridDim.x * blockDim.x;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += step) {
    const long long row = idx / D;
    float m = -INFINITY;
    for (int s = 0; s < num_splits; ++s) m = max_nan(m, lse_part[s * n_rows + row]);
    float sum = 0.f, out = 0.f;
    if (m != -INFINITY) {   // else no split saw a key: zeros and -inf
      for (int s = 0; s < num_splits; ++s) {
        const float lse_s = lse_part[s * n_rows + row];
        if (lse_s == -INFINITY) continue;   // an empty split takes no part
        const float w = __expf(lse_s - m);
        sum += w;
        out += w * o_part[(s * n_rows + row) * D + idx % D];
      }
      out /= sum;
    }
    store(o + idx, out);
    if (idx % D == 0) lse[row] = m == -INFINITY ? m : m + logf(sum);
  }
}

template <class T, int D>
static void launch(const void* q, const Layout& lq, const void* k_cache,
                   const void* v_cache, const KVCache& cache, const int* cache_seqlens,
                   int new_keys, void* o, float* o_part, float* lse, float* lse_part,
                   int B, int H, int Hkv, int Sq, int num_splits, float scale,
                   bool causal, cudaStream_t stream) {
  const int rows = (H / Hkv) * Sq, groups = (rows + kDecodeRows - 1) / kDecodeRows;
  const size_t smem = size_t(std::min(rows, kDecodeRows) + 2 * kDecodeKeys) * D * 4;
  const long long pairs = (long long)B * Hkv;
  const bool split = num_splits > 1;
  for (long long pair0 = 0; pair0 < pairs; pair0 += 65535) {   // gridDim.y ≤ 65535
    const dim3 grid(num_splits, unsigned(std::min(pairs - pair0, 65535ll)), groups);
    decode_kernel<T, D><<<grid, kDecodeThreads, smem, stream>>>(
        static_cast<const T*>(q), lq, static_cast<const T*>(k_cache),
        static_cast<const T*>(v_cache), cache, cache_seqlens, new_keys,
        static_cast<T*>(o), split ? o_part : nullptr, split ? lse_part : lse,
        int(pair0), B, H, Hkv, Sq, scale, causal);
  }
  if (!split) return;
  const long long n_rows = (long long)B * H * Sq, n = n_rows * D;
  const long long blocks = std::min((n + 255) / 256, 1ll << 20);
  decode_combine_kernel<T><<<unsigned(blocks), 256, 0, stream>>>(
      o_part, lse_part, static_cast<T*>(o), lse, n_rows, D, num_splits);
}

// dtype: 0 float32, 1 float16, 2 bfloat16. q: [B, H, Sq, D] with strides lq; o: a
// contiguous [B, H, Sq, D] of q's dtype; lse: float [B, H, Sq]. With num_splits > 1,
// o_part [num_splits, B·H·Sq, D] and lse_part [num_splits, B·H·Sq] are the workspace of
// the partial states. Returns false for a head dimension or dtype that is not compiled.
bool decode_attention(int dtype, const void* q, const Layout& lq, const void* k_cache,
                      const void* v_cache, const KVCache& cache,
                      const int* cache_seqlens, int new_keys, void* o, float* o_part,
                      float* lse, float* lse_part, int B, int H, int Hkv, int Sq, int D,
                      int num_splits, float scale, bool causal, cudaStream_t stream) {
#define ATTNBOOK_DECODE_CONFIG(code, T, d)                                            \
  if (dtype == code && D == d) {                                                      \
    launch<T, d>(q, lq, k_cache, v_cache, cache, cache_seqlens, new_keys, o, o_part,  \
                 lse, lse_part, B, H, Hkv, Sq, num_splits, scale, causal, stream);    \
    return true;                                                                      \
  }
#define ATTNBOOK_DECODE_DTYPES(d)            \
  ATTNBOOK_DECODE_CONFIG(0, float, d)        \
  ATTNBOOK_DECODE_CONFIG(1, __half, d)       \
  ATTNBOOK_DECODE_CONFIG(2, __nv_bfloat16, d)
  ATTNBOOK_DECODE_DTYPES(32)
  ATTNBOOK_DECODE_DTYPES(64)
  ATTNBOOK_DECODE_DTYPES(96)
  ATTNBOOK_DECODE_DTYPES(128)
#undef ATTNBOOK_DECODE_DTYPES
#undef ATTNBOOK_DECODE_CONFIG
  return false;
}
