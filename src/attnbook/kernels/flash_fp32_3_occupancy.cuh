// Step 3 of chapter 7's fused fp32 forward: occupancy. Step 2's tiles, loads and
// swizzles, resized so that more blocks share an SM. Step 2 holds 2 blocks of 256
// threads (16 warps) on an sm_80 or sm_90 SM and 1 on a T4's (sm_75: 64 KB of shared
// memory, which step 2's 40 KB at D = 64 leaves room for only once); here, at D = 64,
// 4 blocks (32 warps, 50%) on sm_80 and sm_90 and 2 on sm_75 (16 of its 32 warps).
//
// Shared memory, in floats: Qᵀ [D][Br] (q·scale, loaded once) and one region W that
// holds, in turn, the K tile ([D][Bc] transposed, in chunks of 32 head dims above
// D = 64) and then a Pᵀ chunk of 32 keys ([32][Br]) beside a V chunk of the same 32
// keys ([32][D]). Step 2 keeps all of Pᵀ [Bc][Br] apart; here P V runs in two halves:
// keys 4t + 2h and 4t + 2h + 1 (t < 16) make half h, so that every thread writes 8 of
// its 16 weights to each half's Pᵀ chunk. 32 KB at D = 64 (two blocks fill a T4's 64
// KB), 56 KB at D = 128.
//
// Registers: four blocks of 256 threads on 64 K registers leave 64 a thread, and the
// thread's 16 scores, 16 outputs and 8 operands take 40 of them. So the rest shrinks:
// a row's m and l live in one of the row's 16 lanes (lane tx holds row 4ty + tx % 4,
// fetched by a shuffle), not 4 + 4 in every lane; a tile that needs the mask masks its
// scores one at a time in a loop that is not unrolled (s[0][0] masked, then the 16
// shifted down by one), so that no row's or key's mask offsets stay in registers; and
// the staging loops make whole passes of the block, their addresses a base plus
// constants. __launch_bounds__(256, 4) holds ptxas to 64 at D ≤ 64 ((256, 2) above,
// as step 2), with no spills on sm_75, sm_80 and sm_90, as the key loop leaves the
// padding to its own end: kv_end stops at key_lengths[b], and no key at or past kv_end
// is admitted (the causal diagonal and the window end it too). So the loop masks keys
// j ≥ kv_end itself, counts a tile that crosses kv_end as guarded, and hands on the
// mask without key_lengths: b is dead in the loop. With b live, sm_90 spilled one word
// (kv_end, reloaded once per key tile).
//
// Everything else is step 2's: the 16 x 16 grid of 4 x 4 tiles, at least 8 FMAs per
// shared-memory load, the swizzles, NaN, inf and masked keys, and the global traffic
// (Q once, K and V once per query tile, O once, in 16-byte loads and stores).
#pragma once
#include "flash_fp32_2_register_tiles.cuh"
#include "mask.cuh"
#include "max_nan.cuh"

// Blocks of 256 threads an SM holds at D (sm_80 and sm_90): the launch bound.
template <int D>
constexpr int occupancy_blocks() {
  return D <= 64 ? 4 : 2;
}

// Shared memory of a block, in bytes: Qᵀ and the region W.
template <int D>
constexpr int occupancy_smem_bytes() {
  return 4 * (D * kRtBr + kRtChunk * (kRtBr + D));
}

// q [B, H, Sq, D], k and v [B, Hkv, Sk, D] (strides lq, lk, lv; rows on 16 bytes),
// o contiguous [B, H, Sq, D], lse [B, H, Sq]. Grid (ceil(Sq / 64), B·H pairs from bh0),
// 256 threads, occupancy_smem_bytes<D>() of dynamic shared memory. D: 32, 64, 96 or
// 128.
template <int D>
__global__ void __launch_bounds__(kRtThreads, occupancy_blocks<D>())
    flash_fwd_fp32_occupancy_kernel(const float* __restrict__ q,
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
  float* W = Qt + D * Br;                   // K [KC][Bc], or Pᵀ chunk [32][Br]
  float* Vc = W + kRtChunk * Br;            // and V chunk [32][D]
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  const float* kb = k + b * lk.b + hk * lk.h;
  const float* vb = v + b * lv.b + hk * lv.h;

  load_transposed<Br, D>(Qt, q + b * lq.b + h * lq.h + row_lo * lq.s, lq.s,
                         row_hi - row_lo + 1, scale);
  // m and l of row 4ty + tx % 4 (each of the thread's rows has 4 lanes that hold them)
  float acc[4][NV * VW] = {}, m = -INFINITY, l = 0.f;

  int kv_begin, kv_end;   // the same for every thread of the block: the barriers match
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  MaskParams in_loop = mask;       // j < kv_end masks the padding: no key_lengths[b],
  in_loop.key_lengths = nullptr;   // so b is dead in the loop
  for (int j0 = kv_begin; j0 < kv_end; j0 += Bc) {
    // S = (Q·scale) Kᵀ, K staged through W KC head dims at a time.
    constexpr int KC = D <= 64 ? D : kRtChunk;
    float s[4][4] = {};
    tile_scores<D, KC>(s, Qt, W, kb + j0 * lk.s, lk.s, min(Bc, Sk - j0), ty, tx);

    // Mask, then the online softmax of each of the thread's 4 rows.
    const bool guarded = j0 + Bc > kv_end || !tile_unmasked(in_loop, b, row_lo, row_hi,
                                                             j0, j0 + Bc, Sq, Sk);
    if (guarded)   // one score at a time: s[0][0] masked, then the 16 shift down by one
#pragma unroll 1
      for (int e = 0; e < 16; ++e) {
        const int row = row_lo + 4 * ty + e / 4, j = j0 + 4 * tx + e % 4;
        const float masked = row < Sq && j < kv_end
                                 ? masked_score(in_loop, s[0][0], b, h, row, j, Sq, Sk)
                                 : -INFINITY;
#pragma unroll
        for (int f = 0; f < 15; ++f) s[f / 4][f % 4] = s[(f + 1) / 4][(f + 1) % 4];
        s[3][3] = masked;
      }
#pragma unroll
    for (int i = 0; i < 4; ++i) {   // s becomes p, in place
      float mx = -INFINITY;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) mx = max_nan(mx, s[i][jj]);
#pragma unroll
      for (int lanes = 8; lanes > 0; lanes /= 2)   // the row's 16 threads
        mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, lanes));
      const float m_old = __shfl_sync(0xffffffffu, m, i, 16);
      const float m_new = max_nan(m_old, mx);
      const float base = m_new == -INFINITY ? 0.f : m_new;   // no key yet: p = 0
      const float alpha = __expf(m_old - base);              // 0 on the first key
#pragma unroll
      for (int c = 0; c < NV * VW; ++c) acc[i][c] *= alpha;
      float sum = 0.f;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        s[i][jj] = s[i][jj] == -INFINITY ? -0.f : __expf(s[i][jj] - base);
        sum += s[i][jj];
      }
#pragma unroll
      for (int lanes = 8; lanes > 0; lanes /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, lanes);
      if (tx % 4 == i) {
        m = m_new;
        l = l * alpha + sum;
      }
    }

    // O += P V in two halves: keys 4t + 2h and 4t + 2h + 1 (t < 16) of half h, each
    // with its Pᵀ chunk and V chunk in W. Key 4t + 2h + e is row 4(t % 8) + 2(t / 8)
    // + e of both: the 8 lanes of a quarter-warp store to rows of distinct swizzles.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int e = 0; e < 2; ++e)
        *reinterpret_cast<float4*>(
            W + swizzled<Br>(4 * (tx % 8) + 2 * (tx / 8) + e, 4 * ty)) =
            make_float4(s[0][2 * half + e], s[1][2 * half + e], s[2][2 * half + e],
                        s[3][2 * half + e]);
      bool odd = false;   // NaN or inf among the values this thread staged
#pragma unroll 1
      for (int pass = 0; pass < kRtChunk * D / 4 / kRtThreads; ++pass) {
        const unsigned idx = threadIdx.x + pass * kRtThreads;
        const int r = idx / (D / 4), col = 4 * (idx % (D / 4));
        const int key = j0 + 4 * (r / 4 + 8 * (r / 2 % 2)) + 2 * half + r % 2;
        const float4 x = key < Sk
                             ? *reinterpret_cast<const float4*>(vb + key * lv.s + col)
                             : make_float4(0.f, 0.f, 0.f, 0.f);
        odd |= !isfinite(x.x + x.y + x.z + x.w);
        *reinterpret_cast<float4*>(Vc + r * D + col) = x;
      }
      // The chunks are complete; every thread learns whether some v of it is NaN or
      // inf.
      if (__syncthreads_or(odd) && guarded)
        accumulate_pv<D, VW, NV, true>(acc, W, Vc, 0, ty, tx);
      else
        accumulate_pv<D, VW, NV, false>(acc, W, Vc, 0, ty, tx);
      __syncthreads();   // all are done with W before it is refilled
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float li = __shfl_sync(0xffffffffu, l, i, 16);
    const int row = row_lo + 4 * ty + i;
    if (row >= Sq) continue;
    const float inv = li == 0.f ? 0.f : 1.f / li;   // no admitted key: zeros
    float out[NV * VW];
#pragma unroll
    for (int c = 0; c < NV * VW; ++c) out[c] = acc[i][c] * inv;
    float* orow = o + (size_t(bh) * Sq + row) * D;
#pragma unroll
    for (int n = 0; n < NV; ++n) store_vec<VW>(orow + VW * (tx + 16 * n), out + n * VW);
    if (tx == i)
      lse[size_t(bh) * Sq + row] = l == 0.f ? -INFINITY : m + logf(l);
  }
}
