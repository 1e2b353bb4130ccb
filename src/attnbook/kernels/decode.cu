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
// through shared memory in tiles of 32, one key per lane: lane j scores key j for every
// row of its warp, the warp reduces max and sum with shuffles, then each key's value
// is read once and added, weighted, into each row of the warp that may see the key.
//
// Memory traffic. The cache is read in 16-byte chunks (8 fp16/bf16 or 4 fp32 values,
// one load instruction each), 128 consecutive chunks per block-wide load: K and V
// move from global memory to registers and, unconverted, to shared memory (a tile is
// 2·32·D·sizeof(T) bytes). Each key's page and slot is found once per block, by a lane
// of warp 0, not once per element. The next tile's loads are issued before the current
// tile is computed (registers as a second buffer), so their latency hides behind it.
// A cache that is not 16-byte aligned (a view at an odd offset) takes element loads.
//
// Invariant after each tile, per row: over the keys seen so far, with m their largest
// score, acc = Σ_j exp(s_j − m) v_j and l = Σ_j exp(s_j − m) (chapter 6's online
// softmax). Masked keys (past the sequence's length, or after the query's causal
// position) never take part, not even as 0·v. NaN and inf propagate as in the fused
// kernel (max_nan).
#include <algorithm>
#include <cmath>
#include <cstdint>
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

// A 16-byte chunk of the cache (uint4: its bits) as kN floats.
__device__ __forceinline__ float bits_to_float(unsigned short u, __half) {
  return __half2float(__ushort_as_half(u));
}
__device__ __forceinline__ float bits_to_float(unsigned short u, __nv_bfloat16) {
  return __uint_as_float(unsigned(u) << 16);   // bf16 is fp32's upper half
}
template <class T>
__device__ __forceinline__ void unpack(uint4 c, float (&f)[16 / sizeof(T)]) {
  const unsigned w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(T) == 4) {
      f[i] = __uint_as_float(w[i]);
    } else {
      f[2 * i] = bits_to_float((unsigned short)(w[i] & 0xffffu), T());
      f[2 * i + 1] = bits_to_float((unsigned short)(w[i] >> 16), T());
    }
  }
}

// The 16 bytes at p: one load if wide (p aligned), else one load per element.
template <class T>
__device__ __forceinline__ uint4 load_chunk(const T* p, bool wide) {
  if (wide) return *reinterpret_cast<const uint4*>(p);
  unsigned w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(T) == 4) {
      w[i] = reinterpret_cast<const unsigned*>(p)[i];
    } else {
      const unsigned short* u = reinterpret_cast<const unsigned short*>(p);
      w[i] = u[2 * i] | unsigned(u[2 * i + 1]) << 16;
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Where the keys j0 … j0 + 31 of a tile live; page −1: past the split's keys, not
// loaded. Two arrays, so that lane j's two 4-byte stores are conflict-free.
struct TileKeys {
  int page[kDecodeKeys], slot[kDecodeKeys];
};
__device__ __forceinline__ void locate_keys(TileKeys& at, const KVCache& cache, int b,
                                            int j0, int k_end) {
  const int lane = threadIdx.x % 32;
  int page = -1, slot = 0;
  if (j0 + lane < k_end && !kv_slot(cache, b, j0 + lane, &page, &slot)) page = -1;
  at.page[lane] = page;
  at.slot[lane] = slot;
}

// q: [B, H, Sq, D] (strides lq). cache_seqlens[b] + new_keys keys of sequence b are
// attended (the new ones already appended). Query row i of Sq may attend key j if
// j < L_b and, when causal, j ≤ L_b − Sq + i (bottom-right alignment).
// Output rows are the B·H·Sq rows of [B, H, Sq]: with o_part == nullptr, o and lse get
// the final output and log-sum-exp; otherwise split s writes o_part[s][row][:] and
// lse[s][row]. wide: the caches are 16-byte aligned, rows, heads and pages too.
// Two blocks per SM at least: ptxas may use up to 255 registers (the next tile's
// chunks and 8 rows' states), where its own choice spilled fp32 at D = 96 on sm_90.
template <class T, int D>
__global__ void __launch_bounds__(kDecodeThreads, 2)
    decode_kernel(const T* __restrict__ q, Layout lq, const T* __restrict__ k_cache,
                  const T* __restrict__ v_cache, KVCache cache, bool wide,
                  const int* __restrict__ cache_seqlens, int new_keys,
                  T* __restrict__ o, float* __restrict__ o_part,
                  float* __restrict__ lse, int pair0, int B, int H, int Hkv, int Sq,
                  float scale, bool causal) {
  constexpr int kWarps = kDecodeThreads / 32, kRowsPerWarp = kDecodeRows / kWarps;
  constexpr int kPerLane = D / 32;
  constexpr int kN = 16 / sizeof(T), kChunks = D / kN;   // a key row: kChunks × 16 B
  constexpr int kLoads = kDecodeKeys * kChunks / kDecodeThreads;   // per thread
  // Rows of the tile in 128 bytes (one pass of the 32 banks), for the read rotation.
  constexpr int kRowsPerLine = D * int(sizeof(T)) >= 128 ? 1 : 128 / (D * sizeof(T));
  static_assert(kLoads * kDecodeThreads == kDecodeKeys * kChunks && kN % 4 == 0);
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* ks = reinterpret_cast<T*>(smem_bytes);   // [kDecodeKeys][D]: a tile of keys
  T* vs = ks + kDecodeKeys * D;               // [kDecodeKeys][D]: and of values
  float* qs = reinterpret_cast<float*>(vs + kDecodeKeys * D);   // [rows][D], see below
  const int pair = pair0 + blockIdx.y, b = pair / Hkv, hk = pair % Hkv, G = H / Hkv;
  const int row0 = blockIdx.z * kDecodeRows, rows = min(kDecodeRows, G * Sq - row0);
  TileKeys* loc = reinterpret_cast<TileKeys*>(qs + rows * D);   // [2]: t and t + 1
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // This split's keys, in whole tiles. A split with no tile writes an empty state:
  // m = -inf, l = 0.
  int k_begin, k_end;
  const long long L =
      split_keys(cache, cache_seqlens, new_keys, b, kDecodeKeys, &k_begin, &k_end);
  const int n_tiles = (k_end - k_begin + kDecodeKeys - 1) / kDecodeKeys;

  // Block row r is query i = r % Sq of head hk·G + r / Sq, times scale. Element d =
  // c·kN + e of a row (chunk c) sits at x = (e / 4)·(D / kN)·4 + c·4 + e % 4: the
  // float4 holding a lane's part of chunk c comes next to its neighbours' parts, so
  // the reads below are conflict-free (and so are these writes, consecutive in x).
  for (int idx = threadIdx.x; idx < rows * D; idx += kDecodeThreads) {
    const int r = row0 + idx / D, h = hk * G + r / Sq, i = r % Sq, x = idx % D;
    const int d = x / 4 % kChunks * kN + x / (4 * kChunks) * 4 + x % 4;
    qs[idx] = to_float(q[b * lq.b + h * lq.h + i * lq.s + d]) * scale;
  }
  if (warp == 0) locate_keys(loc[0], cache, b, k_begin, k_end);
  __syncthreads();

  // Thread t moves chunks t, t + 128, … of the tile: chunk x is chunk x % kChunks of
  // key x / kChunks; consecutive threads read consecutive 16 bytes of a key row.
  uint4 kr[kLoads], vr[kLoads];
  auto fetch = [&](const TileKeys& at) {
#pragma unroll
    for (int n = 0; n < kLoads; ++n) {
      const int x = threadIdx.x + n * kDecodeThreads, c = x % kChunks;
      const int page = at.page[x / kChunks], slot = at.slot[x / kChunks];
      kr[n] = vr[n] = make_uint4(0, 0, 0, 0);   // keys past k_end: zeros, never used
      if (page < 0) continue;
      kr[n] = load_chunk(k_cache + kv_offset(cache.k, page, hk, slot) + c * kN, wide);
      vr[n] = load_chunk(v_cache + kv_offset(cache.v, page, hk, slot) + c * kN, wide);
    }
  };
  auto stage = [&] {
#pragma unroll
    for (int n = 0; n < kLoads; ++n) {
      const int x = threadIdx.x + n * kDecodeThreads;
      reinterpret_cast<uint4*>(ks)[x] = kr[n];
      reinterpret_cast<uint4*>(vs)[x] = vr[n];
    }
  };
  fetch(loc[0]);
  stage();
  if (warp == 0) locate_keys(loc[1], cache, b, k_begin + kDecodeKeys, k_end);
  __syncthreads();   // tile 0 and tile 1's locations

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.f;
    for (int c = 0; c < kPerLane; ++c) acc[rr][c] = 0.f;
  }

  for (int t = 0; t < n_tiles; ++t) {
    const int j0 = k_begin + t * kDecodeKeys, j = j0 + lane;
    if (t + 1 < n_tiles) fetch(loc[(t + 1) % 2]);   // in flight during the compute

    // Scores: lane j dots key j with every row of its warp, a 16-byte chunk at a time,
    // starting at chunk lane / kRowsPerLine: the lanes of a quarter-warp read 8
    // different 16-byte bank groups (reading chunk 0 together would hit one group 8
    // times). Each key chunk serves all the warp's rows.
    float dot[kRowsPerWarp] = {};
    for (int n = 0, c = lane / kRowsPerLine % kChunks; n < kChunks;
         ++n, c = c + 1 == kChunks ? 0 : c + 1) {
      float kf[kN];
      unpack<T>(reinterpret_cast<const uint4*>(ks + lane * D)[c], kf);
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        if (warp + rr * kWarps >= rows) break;
        const float* qr = qs + (warp + rr * kWarps) * D + c * 4;
#pragma unroll
        for (int u = 0; u < kN / 4; ++u) {
          const float4 qv = *reinterpret_cast<const float4*>(qr + u * kChunks * 4);
          dot[rr] += qv.x * kf[4 * u] + qv.y * kf[4 * u + 1] + qv.z * kf[4 * u + 2] +
                     qv.w * kf[4 * u + 3];
        }
      }
    }

    // The online softmax, per row: p = exp(s − m_new) for the live keys.
    float p[kRowsPerWarp];
    unsigned live[kRowsPerWarp], any = 0;
#pragma unroll   // constant indices keep m, l, p and acc in registers
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      live[rr] = 0;
      const int r = warp + rr * kWarps;   // the same for the whole warp: shuffles agree
      if (r >= rows) continue;
      const int i = (row0 + r) % Sq;
      const long long last = causal ? L - Sq + i : L - 1;   // the row's last key
      const float s = j < k_end && j <= last ? dot[rr] : -INFINITY;
      live[rr] = __ballot_sync(0xffffffffu, s != -INFINITY);
      const float m_tile = warp_max(s);
      if (live[rr] == 0) continue;   // every key of the tile is masked for this row
      const float m_new = max_nan(m[rr], m_tile);
      const float alpha = __expf(m[rr] - m_new);   // 0 on the row's first live tile
      p[rr] = s == -INFINITY ? 0.f : __expf(s - m_new);
      l[rr] = l[rr] * alpha + warp_sum(p[rr]);
      for (int c = 0; c < kPerLane; ++c) acc[rr][c] *= alpha;
      m[rr] = m_new;
      any |= live[rr];
    }
    // Values: each key live for some row is read once (lane d + 32c reads element d +
    // 32c: consecutive) and added into each row it is live for.
    for (unsigned bits = any; bits; bits &= bits - 1) {
      const int jj = __ffs(int(bits)) - 1;
      float vf[kPerLane];
      for (int c = 0; c < kPerLane; ++c) vf[c] = to_float(vs[jj * D + lane + 32 * c]);
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        if (!(live[rr] >> jj & 1u)) continue;   // uniform: live is the warp's
        const float pj = __shfl_sync(0xffffffffu, p[rr], jj);
        for (int c = 0; c < kPerLane; ++c) acc[rr][c] += pj * vf[c];
      }
    }

    if (warp == 0)   // tile t + 2's keys; tile t's locations were read a barrier ago
      locate_keys(loc[t % 2], cache, b, j0 + 2 * kDecodeKeys, k_end);
    __syncthreads();   // every warp is done with the tile
    if (t + 1 < n_tiles) {
      stage();
      __syncthreads();   // tile t + 1 is complete before any read
    }
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

#include "decode_tc.cuh"   // after store(): the tensor-core step uses it

// Launches decode_tc_kernel<T, D> and returns true where it serves the call: 16-bit
// values, D 64 or 128, every row admitting every key below the length, aligned
// caches, and a GPU with cp.async, bf16 mma and the kernel's shared memory (sm_80 or
// newer; the emulator is sm_80). Its arguments are launch's.
template <class T, int D>
static bool launch_tensor_cores(const void* q, const Layout& lq, const void* k_cache,
                                const void* v_cache, const KVCache& cache,
                                const int* cache_seqlens, int new_keys, void* o,
                                float* o_part, float* lse, int B, int H, int Hkv,
                                int Sq, int num_splits, float scale, bool causal,
                                bool wide, cudaStream_t stream) {
  if constexpr (sizeof(T) != 2 || (D != 64 && D != 128)) {
    return false;
  } else {
    constexpr int bytes = decode_tc_bytes<D>();
    if (!wide || (causal && Sq > 1)) return false;
    // Whether the GPU can run it (sm_80+, the shared memory opted in), asked once per
    // device: a decode step runs in every layer for every token. 0: not asked yet.
    static signed char capable[64] = {};   // 1 yes, -1 no
    int device = 0;
    cudaGetDevice(&device);
    signed char unlisted = 0;
    signed char& can = device < 64 ? capable[device] : unlisted;
    if (can == 0) {
      int major = 0, optin = 0;
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
      constexpr auto kOptIn = cudaFuncAttributeMaxDynamicSharedMemorySize;
      const bool fits =
          major >= 8 && optin >= bytes &&
          cudaFuncSetAttribute(decode_tc_kernel<T, D>, kOptIn, bytes) == cudaSuccess;
      can = fits ? 1 : -1;
    }
    if (can < 0) return false;
    const int groups = ((H / Hkv) * Sq + kTcDecodeRows - 1) / kTcDecodeRows;
    const long long pairs = (long long)B * Hkv;
    for (long long pair0 = 0; pair0 < pairs; pair0 += 65535) {   // gridDim.y ≤ 65535
      const dim3 grid(num_splits, unsigned(std::min(pairs - pair0, 65535ll)), groups);
      decode_tc_kernel<T, D><<<grid, 32 * kTcDecodeWarps, bytes, stream>>>(
          static_cast<const T*>(q), lq, static_cast<const T*>(k_cache),
          static_cast<const T*>(v_cache), cache, cache_seqlens, new_keys,
          static_cast<T*>(o), o_part, lse, int(pair0), B, H, Hkv, Sq, scale);
    }
    return true;
  }
}

template <class T, int D>
static void launch(const void* q, const Layout& lq, const void* k_cache,
                   const void* v_cache, const KVCache& cache, const int* cache_seqlens,
                   int new_keys, void* o, float* o_part, float* lse, float* lse_part,
                   int B, int H, int Hkv, int Sq, int num_splits, float scale,
                   bool causal, cudaStream_t stream) {
  const int rows = (H / Hkv) * Sq, groups = (rows + kDecodeRows - 1) / kDecodeRows;
  const size_t smem = 2 * kDecodeKeys * D * sizeof(T) +
                      size_t(std::min(rows, kDecodeRows)) * D * 4 +
                      2 * sizeof(TileKeys);
  // 16-byte loads need every chunk on 16 bytes: the caches' starts and each stride that
  // is used (a dimension of size 1 never moves).
  constexpr long long kN = 16 / sizeof(T);
  auto aligned = [&](const void* p, const Layout& l) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 &&
           (cache.num_pages < 2 || l.b % kN == 0) && (Hkv < 2 || l.h % kN == 0) &&
           (cache.block_size < 2 || l.s % kN == 0);
  };
  const bool wide = aligned(k_cache, cache.k) && aligned(v_cache, cache.v);
  const long long pairs = (long long)B * Hkv;
  const bool split = num_splits > 1;
  if (!launch_tensor_cores<T, D>(q, lq, k_cache, v_cache, cache, cache_seqlens,
                                 new_keys, o, split ? o_part : nullptr,
                                 split ? lse_part : lse, B, H, Hkv, Sq, num_splits,
                                 scale, causal, wide, stream)) {
    if (smem > 48 * 1024)   // fp32, D = 128, 32 rows: opt in (a failure fails it)
      cudaFuncSetAttribute(decode_kernel<T, D>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    for (long long pair0 = 0; pair0 < pairs; pair0 += 65535) {   // gridDim.y ≤ 65535
      const dim3 grid(num_splits, unsigned(std::min(pairs - pair0, 65535ll)), groups);
      decode_kernel<T, D><<<grid, kDecodeThreads, smem, stream>>>(
          static_cast<const T*>(q), lq, static_cast<const T*>(k_cache),
          static_cast<const T*>(v_cache), cache, wide, cache_seqlens, new_keys,
          static_cast<T*>(o), split ? o_part : nullptr, split ? lse_part : lse,
          int(pair0), B, H, Hkv, Sq, scale, causal);
    }
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
