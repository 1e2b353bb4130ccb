// Step 2 of chapter 11's fp32 backward: eight lanes per row or key. Step 1 gives each
// query row (dQ kernel) or key (dK/dV kernel) one thread, which keeps its D-long
// vectors in registers: q, dO and the dq accumulator (3·D floats), or k, v, dk and dv
// (4·D, of which step 1 keeps k and v in shared memory). Past D = 64 that is more than
// the 255 registers a thread may have, and the rest spills to local memory.
//
// Here a row or a key belongs to a group of 8 consecutive lanes. Lane t of a group owns
// columns 4t … 4t + 3 of every 32, D / 8 of them as D / 32 float4s, and keeps its share
// of the vectors: 3·D / 8 or 4·D / 8 floats, at most 64 at D = 128. A dot product over
// D is the group's 8 partial sums, added by 3 xor-shuffles among the group's lanes
// (their own mask, so that groups may part ways); every lane then holds the same p and
// ds and updates its own columns.
//
// Shared memory: a group reads a row of a tile as 8 float4s at consecutive addresses
// (128 bytes: one wavefront per quarter-warp), the same ones in every group of the
// warp: a broadcast, conflict-free without padding. Per row and key a lane makes 2·D/32
// float4 loads for the two dots and 2·D/32 for the updates (dK/dV; dQ: D/32), 4 FMAs
// each.
//
// Global traffic as step 1, in 16-byte loads and stores: the dK/dV kernel reads K and V
// once and Q, dO (with their rows' L and D_i, staged beside them) once per block of 32
// keys; the dQ kernel reads Q and dO once and K, V once per block of 64 rows. Every
// element of dQ, dK and dV is still written by one lane that adds its terms in a fixed
// order: the result is the same bit for bit on every run.
#pragma once
#include "mask.cuh"

// p = exp(s − L) for a masked score s; 0 for a masked key or a row with no key at all.
__device__ __forceinline__ float recompute_p(float s, float L) {
  return s == -INFINITY || L == -INFINITY ? 0.f : __expf(s - L);
}

// __launch_bounds__(threads, 1): one block an SM is enough, so ptxas takes the
// registers a thread needs (up to 157 at D = 128) rather than spilling to fit more
// blocks, as it chose to without the hint (8 to 40 bytes at some head dims).
constexpr int kBwdGroup = 8;       // lanes per row or key
constexpr int kBwdKeys = 32;       // keys of a dK/dV block, and of a dQ block's K tile
constexpr int kBwdRows = 64;       // rows of a dQ block
constexpr int kBwdRowTile = 32;    // rows of a dK/dV block's Q tile
constexpr int kBwdKVThreads = kBwdKeys * kBwdGroup, kBwdQThreads = kBwdRows * kBwdGroup;

// The sum of v over the 8 lanes of the group: every lane gets the same bits (each
// level adds the same two numbers, in either order).
__device__ __forceinline__ float group_sum(float v, unsigned lanes) {
  for (int offset = kBwdGroup / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(lanes, v, offset);
  return v;
}
__device__ __forceinline__ float dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
__device__ __forceinline__ void fma4(float4& acc, float s, float4 x) {
  acc.x += s * x.x;
  acc.y += s * x.y;
  acc.z += s * x.z;
  acc.w += s * x.w;
}
// Rows x D floats of a [., D] tensor from row `first` (zeros past `last`) into tile,
// 16 bytes per thread, consecutive threads on consecutive float4s. The rows start on
// 16 bytes (ops/backward.py copies a tensor whose rows do not).
template <int D, int Rows, int Threads>
__device__ __forceinline__ void stage_rows(float (*tile)[D], const float* src,
                                           long long first, long long last) {
  for (int idx = threadIdx.x; idx < Rows * D / 4; idx += Threads) {
    const long long r = first + idx / (D / 4);
    reinterpret_cast<float4*>(&tile[0][0])[idx] =
        r <= last ? reinterpret_cast<const float4*>(src + r * D)[idx % (D / 4)]
                  : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}
// Lane t's columns of a row of D floats (zeros for an inactive row): its float4s t,
// t + 8, …: columns 32m + 4t … 32m + 4t + 3.
template <int D>
__device__ __forceinline__ void load_columns(float4 (&x)[D / 32], const float* row,
                                             bool active, int t) {
#pragma unroll
  for (int m = 0; m < D / 32; ++m)
    x[m] = active ? reinterpret_cast<const float4*>(row)[8 * m + t]
                  : make_float4(0.f, 0.f, 0.f, 0.f);
}
__device__ __forceinline__ float4 scaled(float4 x, float s) {
  return make_float4(x.x * s, x.y * s, x.z * s, x.w * s);
}

// Grid: (ceil(Sk / 32), B·Hkv) from (batch, kv head) bh0 on; 256 threads, 8 per key.
// Layouts as step 1's.
template <int D>
__global__ void __launch_bounds__(kBwdKVThreads, 1)
    flash_bwd_dkdv_lanes_kernel(const float* __restrict__ q,
                                const float* __restrict__ k,
                                const float* __restrict__ v,
                                const float* __restrict__ dout,
                                const float* __restrict__ lse,
                                const float* __restrict__ delta, float* __restrict__ dk,
                                float* __restrict__ dv, int bh0, int H, int Hkv,
                                int Sq, int Sk, float scale, MaskParams mask) {
  constexpr int kQuads = D / 32;   // float4s of a row per lane
  static_assert(D % 32 == 0);
  __shared__ __align__(16) float Qs[kBwdRowTile][D], dOs[kBwdRowTile][D];
  __shared__ float Ls[kBwdRowTile], Ds[kBwdRowTile];   // the tile's rows' L and D_i
  const int bkv = bh0 + blockIdx.y, b = bkv / Hkv, hk = bkv % Hkv, group = H / Hkv;
  const int j0 = blockIdx.x * kBwdKeys, t = threadIdx.x % kBwdGroup;
  const int j = j0 + threadIdx.x / kBwdGroup;
  const unsigned lanes = 0xffu << (threadIdx.x % 32 / kBwdGroup * kBwdGroup);
  const bool active = j < Sk;
  float4 kr[kQuads], vr[kQuads], dk_acc[kQuads] = {}, dv_acc[kQuads] = {};
  load_columns<D>(kr, k + (size_t(bkv) * Sk + j) * D, active, t);
  load_columns<D>(vr, v + (size_t(bkv) * Sk + j) * D, active, t);
  const float4* Q4 = reinterpret_cast<const float4*>(&Qs[0][0]) + t;
  const float4* dO4 = reinterpret_cast<const float4*>(&dOs[0][0]) + t;

  int i_begin, i_end;   // the same for the whole block: the barriers match
  admitted_query_range(mask, b, j0, min(Sk, j0 + kBwdKeys), Sq, Sk, &i_begin, &i_end);
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const size_t bh = size_t(b) * H + h;
    for (int i0 = i_begin; i0 < i_end; i0 += kBwdRowTile) {
      __syncthreads();   // everyone is done with the previous tiles
      stage_rows<D, kBwdRowTile, kBwdKVThreads>(Qs, q + bh * Sq * D, i0, Sq - 1);
      stage_rows<D, kBwdRowTile, kBwdKVThreads>(dOs, dout + bh * Sq * D, i0, Sq - 1);
      if (threadIdx.x < kBwdRowTile && i0 + threadIdx.x < Sq) {
        Ls[threadIdx.x] = lse[bh * Sq + i0 + threadIdx.x];
        Ds[threadIdx.x] = delta[bh * Sq + i0 + threadIdx.x];
      }
      __syncthreads();
      for (int r = 0; r < kBwdRowTile && i0 + r < Sq; ++r) {
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int m = 0; m < kQuads; ++m) {
          s += dot4(Q4[r * D / 4 + 8 * m], kr[m]);
          dp += dot4(dO4[r * D / 4 + 8 * m], vr[m]);
        }
        s = group_sum(s, lanes);
        dp = group_sum(dp, lanes);
        if (!active) continue;   // the whole group: one key
        s = masked_score(mask, s * scale, b, h, i0 + r, j, Sq, Sk);
        const float p = recompute_p(s, Ls[r]);
        if (p == 0.f) continue;   // a masked key: no term (its v and k never used)
        const float ds = p * (dp - Ds[r]);
#pragma unroll
        for (int m = 0; m < kQuads; ++m) {
          fma4(dv_acc[m], p, dO4[r * D / 4 + 8 * m]);
          fma4(dk_acc[m], ds, Q4[r * D / 4 + 8 * m]);
        }
      }
    }
  }
  if (!active) return;
  float4* dk4 = reinterpret_cast<float4*>(dk + (size_t(bkv) * Sk + j) * D);
  float4* dv4 = reinterpret_cast<float4*>(dv + (size_t(bkv) * Sk + j) * D);
#pragma unroll
  for (int m = 0; m < kQuads; ++m) {
    dk4[8 * m + t] = scaled(dk_acc[m], scale);
    dv4[8 * m + t] = dv_acc[m];
  }
}

// Grid: (ceil(Sq / 64), B·H) from (batch, head) bh0 on; 512 threads, 8 per query row.
template <int D>
__global__ void __launch_bounds__(kBwdQThreads, 1)
    flash_bwd_dq_lanes_kernel(const float* __restrict__ q,
                              const float* __restrict__ k,
                              const float* __restrict__ v,
                              const float* __restrict__ dout,
                              const float* __restrict__ lse,
                              const float* __restrict__ delta, float* __restrict__ dq,
                              int bh0, int H, int Hkv, int Sq, int Sk, float scale,
                              MaskParams mask) {
  constexpr int kQuads = D / 32;
  static_assert(D % 32 == 0);
  __shared__ __align__(16) float Ks[kBwdKeys][D], Vs[kBwdKeys][D];
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * kBwdRows, row_hi = min(Sq, row_lo + kBwdRows) - 1;
  const int i = row_lo + threadIdx.x / kBwdGroup, t = threadIdx.x % kBwdGroup;
  const unsigned lanes = 0xffu << (threadIdx.x % 32 / kBwdGroup * kBwdGroup);
  const bool active = i < Sq;
  const size_t row = (size_t(bh) * Sq + i) * D;
  const long long kv0 = (long long)(b * Hkv + hk) * Sk;   // the head's first key row
  float4 qr[kQuads], dor[kQuads], acc[kQuads] = {};
  load_columns<D>(qr, q + row, active, t);
  load_columns<D>(dor, dout + row, active, t);
  const float L = active ? lse[size_t(bh) * Sq + i] : -INFINITY;
  const float Di = active ? delta[size_t(bh) * Sq + i] : 0.f;
  const float4* K4 = reinterpret_cast<const float4*>(&Ks[0][0]) + t;
  const float4* V4 = reinterpret_cast<const float4*>(&Vs[0][0]) + t;

  int kv_begin, kv_end;   // the same for the whole block: the barriers match
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  for (int j0 = kv_begin; j0 < kv_end; j0 += kBwdKeys) {
    stage_rows<D, kBwdKeys, kBwdQThreads>(Ks, k, kv0 + j0, kv0 + Sk - 1);
    stage_rows<D, kBwdKeys, kBwdQThreads>(Vs, v, kv0 + j0, kv0 + Sk - 1);
    __syncthreads();   // the tile is complete before anyone reads it
    for (int jj = 0; jj < kBwdKeys && j0 + jj < kv_end; ++jj) {
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int m = 0; m < kQuads; ++m) {
        s += dot4(qr[m], K4[jj * D / 4 + 8 * m]);
        dp += dot4(dor[m], V4[jj * D / 4 + 8 * m]);
      }
      s = group_sum(s, lanes);
      dp = group_sum(dp, lanes);
      if (!active) continue;   // the whole group: one row
      s = masked_score(mask, s * scale, b, h, i, j0 + jj, Sq, Sk);
      const float p = recompute_p(s, L);
      if (p == 0.f) continue;
      const float ds = p * (dp - Di);
#pragma unroll
      for (int m = 0; m < kQuads; ++m) fma4(acc[m], ds, K4[jj * D / 4 + 8 * m]);
    }
    __syncthreads();   // all are done with the tile before the next load overwrites it
  }
  if (!active) return;
  float4* dq4 = reinterpret_cast<float4*>(dq + row);
#pragma unroll
  for (int m = 0; m < kQuads; ++m) dq4[8 * m + t] = scaled(acc[m], scale);
}
