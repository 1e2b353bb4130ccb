// Step 1: attention on tensor cores. Each warp computes S = Q Kᵀ for its 16 rows with
// mma.sync m16n8k16 (fp32 accumulators), runs the online softmax on the accumulator
// fragments, writes P (as T) to shared memory and accumulates O += P V with mma.sync
// again. Every lane loads its own fragment elements with 32-bit shared-memory loads
// (LaneFragments); step 2 replaces only that.
//
// Traffic per block and key tile: K and V tiles (Bc·D elements each) once from global
// memory into shared memory; from there each warp reads all of K and V, i.e. shared
// memory serves Warps times what global memory delivers.
#pragma once
#include "flash_tc.cuh"

// Fragments loaded lane by lane, from unswizzled tiles.
struct LaneFragments {
  static constexpr bool kSwizzle = false;

  template <int W>
  static __device__ uint32_t at(const uint16_t* s, int row, int col) {
    return *reinterpret_cast<const uint32_t*>(s + tile_offset<W, false>(row, col));
  }
  // A (16x16, row-major) from rows r0.., columns k0.. of a [rows][W] tile.
  template <int W>
  static __device__ void load_a(uint32_t* a, const uint16_t* s, int r0, int k0,
                                int lane) {
    const int g = lane / 4, t = lane % 4;
    a[0] = at<W>(s, r0 + g, k0 + 2 * t);
    a[1] = at<W>(s, r0 + g + 8, k0 + 2 * t);
    a[2] = at<W>(s, r0 + g, k0 + 8 + 2 * t);
    a[3] = at<W>(s, r0 + g + 8, k0 + 8 + 2 * t);
  }
  // B (16x8) of two n-tiles n0 and n0 + 8 (b[0..1], b[2..3]) from a tile that holds
  // Bᵀ: B(k, n) = s[n][k], as K holds Kᵀ's columns. A lane's pair is contiguous.
  template <int W>
  static __device__ void load_b_rows(uint32_t* b, const uint16_t* s, int n0, int k0,
                                      int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      b[2 * j] = at<W>(s, n0 + 8 * j + g, k0 + 2 * t);
      b[2 * j + 1] = at<W>(s, n0 + 8 * j + g, k0 + 8 + 2 * t);
    }
  }
  // The same from a tile that holds B itself: B(k, n) = s[k][n], as V does. A lane's
  // pair sits in two rows: two 16-bit loads per register.
  template <int W>
  static __device__ void load_b_cols(uint32_t* b, const uint16_t* s, int k0, int n0,
                                      int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int k = k0 + 2 * t + 8 * (j % 2), n = n0 + 8 * (j / 2) + g;
      b[j] = s[tile_offset<W, false>(k, n)] |
             uint32_t(s[tile_offset<W, false>(k + 1, n)]) << 16;
    }
  }
};

// S = Q Kᵀ for the warp's 16 rows (Qs rows q0..) and the Bc keys of Ks.
template <class T, int D, int Bc, class F>
__device__ __forceinline__ void warp_scores(float (&s)[Bc / 8][4], const uint16_t* Qs,
                                            const uint16_t* Ks, int q0, int lane) {
#pragma unroll
  for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) s[n][i] = 0.f;
#pragma unroll
  for (int k0 = 0; k0 < D; k0 += 16) {
    uint32_t a[4];
    F::template load_a<D>(a, Qs, q0, k0, lane);
#pragma unroll
    for (int n0 = 0; n0 < Bc; n0 += 16) {
      uint32_t b[4];
      F::template load_b_rows<D>(b, Ks, n0, k0, lane);
      mma16816<T>(s[n0 / 8], a, b);
      mma16816<T>(s[n0 / 8 + 1], a, b + 2);
    }
  }
}

// acc += P V for the warp's P (its [16][Bc] slice Ps) and the tile Vs.
template <class T, int D, int Bc, class F>
__device__ __forceinline__ void warp_pv(float (&acc)[D / 8][4], const uint16_t* Ps,
                                        const uint16_t* Vs, int lane) {
#pragma unroll
  for (int k0 = 0; k0 < Bc; k0 += 16) {
    uint32_t a[4];
    F::template load_a<Bc>(a, Ps, 0, k0, lane);
#pragma unroll
    for (int n0 = 0; n0 < D; n0 += 16) {
      uint32_t b[4];
      F::template load_b_cols<D>(b, Vs, k0, n0, lane);
      mma16816<T>(acc[n0 / 8], a, b);
      mma16816<T>(acc[n0 / 8 + 1], a, b + 2);
    }
  }
}

// acc += A B for a 16 x Bk fragment `a` the warp holds in registers (its layout is the
// mma A operand's, as the scores are: step 5's P, the backward's P and dS), rounded to
// T two at a time, and the [Bk][D] tile Bs.
template <class T, int D, int Bk, class F>
__device__ __forceinline__ void warp_mma_fragment(float (&acc)[D / 8][4],
                                                  const float (&a)[Bk / 8][4],
                                                  const uint16_t* Bs, int lane) {
#pragma unroll
  for (int k0 = 0; k0 < Bk; k0 += 16) {
    const float* lo = a[k0 / 8];
    const float* hi = a[k0 / 8 + 1];
    const uint32_t af[4] = {pack2<T>(lo[0], lo[1]), pack2<T>(lo[2], lo[3]),
                            pack2<T>(hi[0], hi[1]), pack2<T>(hi[2], hi[3])};
#pragma unroll
    for (int n0 = 0; n0 < D; n0 += 16) {
      uint32_t bf[4];
      F::template load_b_cols<D>(bf, Bs, k0, n0, lane);
      mma16816<T>(acc[n0 / 8], af, bf);
      mma16816<T>(acc[n0 / 8 + 1], af, bf + 2);
    }
  }
}

// Dynamic shared memory: Q [Br][D], K [Bc][D], V [Bc][D] and P [Br][Bc], 16-bit each.
template <int D, int Bc, int Warps>
constexpr int smem_p_bytes() {
  return 2 * (16 * Warps * D + 2 * Bc * D + 16 * Warps * Bc);
}

// Grid and arguments as chapter 7's kernel (bh0: the launch's first (batch, head)); o
// is a contiguous [B, H, Sq, D] of T, lse a contiguous [B, H, Sq] of float.
template <class T, int D, int Bc, int Warps, class F>
__global__ void __launch_bounds__(32 * Warps)
    flash_tc_smem_p_kernel(const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, T* __restrict__ o,
                           float* __restrict__ lse, Layout lq, Layout lk, Layout lv,
                           int bh0, int H, int Hkv, int Sq, int Sk, float scale,
                           MaskParams mask) {
  constexpr int Br = 16 * Warps, Threads = 32 * Warps;
  constexpr bool Sw = F::kSwizzle;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t *Qs = smem, *Ks = Qs + Br * D, *Vs = Ks + Bc * D, *Ps = Vs + Bc * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  const T* kb = k + b * lk.b + hk * lk.h;
  const T* vb = v + b * lv.b + hk * lv.h;
  uint16_t* Pw = Ps + 16 * warp * Bc;   // this warp's rows of P

  load_tile<Br, D, Sw, Threads, false>(Qs, q + b * lq.b + h * lq.h + row_lo * lq.s,
                                       lq.s, Sq - row_lo);
  float acc[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  int kv_begin, kv_end;   // the same for the whole block: the barriers match
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  for (int j0 = kv_begin; j0 < kv_end; j0 += Bc) {
    load_tile<Bc, D, Sw, Threads, false>(Ks, kb + j0 * lk.s, lk.s, kv_end - j0);
    load_tile<Bc, D, Sw, Threads, false>(Vs, vb + j0 * lv.s, lv.s, kv_end - j0);
    __syncthreads();   // Q (first time), K and V complete before any warp reads them

    float s[Bc / 8][4];
    warp_scores<T, D, Bc, F>(s, Qs, Ks, 16 * warp, lane);
    const bool unmasked = tile_unmasked(mask, b, row_lo, row_hi, j0, j0 + Bc, Sq, Sk);
    scale_and_mask<Bc / 8, false>(s, unmasked, mask, b, h, row_lo + 16 * warp, j0, Sq,
                                  Sk, scale, lane);
    online_softmax<Bc / 8, D / 8, false>(s, acc, m, l);
    store_p<T, Bc, Sw>(Pw, s, lane);
    __syncwarp();   // P is read back by other lanes of the warp
    warp_pv<T, D, Bc, F>(acc, Pw, Vs, lane);
    __syncthreads();   // all warps are done with K, V and P before the next tile
  }
  store_rows<T, D / 8, false>(acc, m, l, o + size_t(bh) * Sq * D, lse + size_t(bh) * Sq,
                              row_lo + 16 * warp, Sq, lane);
}
