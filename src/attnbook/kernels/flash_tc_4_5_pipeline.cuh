// Steps 4 and 5: overlap the copy of the next K/V tile with the math on this one, and
// keep P in registers.
//
// Step 4: K and V are double-buffered. While the warps compute on buffer it % 2, the
// next tile streams into the other buffer with cp.async (sm_80+: the copy goes from
// global to shared memory without passing through registers, and the threads move on at
// once). Two barriers per tile: after the first, this tile has landed for every thread
// (cp.async.wait_group 1 leaves only the newest group in flight); after the second,
// every warp is done with the buffer the next prefetch overwrites. On sm_75 and the
// emulator the copy is synchronous: same result, no overlap.
//
// Step 5 (PInRegisters): the accumulator fragment of S is already laid out as the A
// operand of P·V — lane (g, t) holds rows g and g + 8 at columns 2t, 2t + 1 of each
// 8-key slice, and A(16x16) wants exactly those of two consecutive slices — so P is
// packed to T in registers: no shared-memory round trip, no __syncwarp. The exponent
// becomes exp2 with log2(e)·scale folded into one multiply of the scores.
#pragma once
#include "flash_tc_2_3_ldmatrix_swizzle.cuh"

// Dynamic shared memory: Q [Br][D], K [2][Bc][D], V [2][Bc][D] and, unless P stays in
// registers, P [Br][Bc], 16-bit each.
template <int D, int Bc, int Warps, bool PInRegisters>
constexpr int pipeline_bytes() {
  return 2 * (16 * Warps * D + 4 * Bc * D + (PInRegisters ? 0 : 16 * Warps * Bc));
}

template <class T, int D, int Bc, int Warps, bool PInRegisters>
__global__ void __launch_bounds__(32 * Warps)
    flash_tc_pipeline_kernel(const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, T* __restrict__ o,
                             float* __restrict__ lse, Layout lq, Layout lk, Layout lv,
                             int bh0, int H, int Hkv, int Sq, int Sk, float scale,
                             MaskParams mask) {
  using F = LdmatrixFragments<true>;
  constexpr int Br = 16 * Warps, Threads = 32 * Warps;
  extern __shared__ __align__(128) uint16_t smem[];
  // Buffer i of K is Ks + i·tile (an array of two pointers, indexed at run time, would
  // live in local memory).
  constexpr int tile = Bc * D;
  uint16_t *Qs = smem, *Ks = Qs + Br * D, *Vs = Ks + 2 * tile, *Ps = Vs + 2 * tile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  const T* kb = k + b * lk.b + hk * lk.h;
  const T* vb = v + b * lv.b + hk * lv.h;

  int kv_begin, kv_end;   // the same for the whole block: the barriers match
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  // Group 0: Q and the first K/V tile.
  load_tile<Br, D, true, Threads, true>(Qs, q + b * lq.b + h * lq.h + row_lo * lq.s,
                                        lq.s, Sq - row_lo);
  if (kv_begin < kv_end) {
    load_tile<Bc, D, true, Threads, true>(Ks, kb + kv_begin * lk.s, lk.s,
                                          kv_end - kv_begin);
    load_tile<Bc, D, true, Threads, true>(Vs, vb + kv_begin * lv.s, lv.s,
                                          kv_end - kv_begin);
  }
  cp_async_commit();

  float acc[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for (int j0 = kv_begin, it = 0; j0 < kv_end; j0 += Bc, ++it) {
    const int buf = it % 2, next = j0 + Bc;
    if (next < kv_end) {   // prefetch tile it + 1 into the buffer tile it - 1 used
      uint16_t *Kn = Ks + (1 - buf) * tile, *Vn = Vs + (1 - buf) * tile;
      load_tile<Bc, D, true, Threads, true>(Kn, kb + next * lk.s, lk.s, kv_end - next);
      load_tile<Bc, D, true, Threads, true>(Vn, vb + next * lv.s, lv.s, kv_end - next);
    }
    cp_async_commit();      // possibly empty: the group count stays regular
    cp_async_wait<1>();     // every group but the newest (tile it + 1) has landed
    __syncthreads();        // ... for every thread's copies

    float s[Bc / 8][4];
    warp_scores<T, D, Bc, F>(s, Qs, Ks + buf * tile, 16 * warp, lane);
    const bool unmasked = tile_unmasked(mask, b, row_lo, row_hi, j0, j0 + Bc, Sq, Sk);
    scale_and_mask<Bc / 8, PInRegisters>(s, unmasked, mask, b, h, row_lo + 16 * warp,
                                         j0, Sq, Sk, scale, lane);
    online_softmax<Bc / 8, D / 8, PInRegisters>(s, acc, m, l);
    if constexpr (PInRegisters) {   // P never leaves the registers: no store, no sync
      warp_mma_fragment<T, D, Bc, F>(acc, s, Vs + buf * tile, lane);
    } else {
      uint16_t* Pw = Ps + 16 * warp * Bc;
      store_p<T, Bc, true>(Pw, s, lane);
      __syncwarp();   // P is read back by other lanes of the warp
      warp_pv<T, D, Bc, F>(acc, Pw, Vs + buf * tile, lane);
    }
    __syncthreads();   // every warp is done with buf (and P) before it is refilled
  }
  cp_async_wait<0>();   // no copy outlives the block
  store_rows<T, D / 8, PInRegisters>(acc, m, l, o + size_t(bh) * Sq * D,
                                     lse + size_t(bh) * Sq, row_lo + 16 * warp, Sq,
                                     lane);
}
