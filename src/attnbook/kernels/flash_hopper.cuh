// The pieces chapter 12's Hopper forward steps share (flash_hopper_*.cuh): their
// shared memory and the work of one key tile for a warpgroup's 64 query rows.
//
// Shared memory: every tile is stored as panels of 64 columns, [rows][64] 16-bit
// elements with 128-byte rows, on 1 KiB, swizzled as wgmma's 128-byte swizzle reads
// them (chunk c of row r at chunk c XOR r % 8: chapter 8's tile_offset<64, true>, and
// what TMA's 128-byte swizzle writes). Q: [D/64][64][64]; K and V: [2][D/64][Bc][64]
// each.
#pragma once
#include "flash_tc_6_fa2.cuh"
#include "hopper.cuh"

// Dynamic shared memory: Q's Br rows, `Stages` buffers of K and V, and a kilobyte to
// put Q on 1 KiB whatever the base.
template <int D, int Bc, int Br = 64, int Stages = 2>
constexpr int hopper_bytes() {
  return 2 * (Br * D + 2 * Stages * Bc * D) + 1024;
}

// The wgmma chains of one key tile for a warpgroup's 64 rows (this thread's warp owns
// 16). issue_scores: S = Q Kᵀ as m64n64k16 wgmmas over the D / 16 slices of the head
// dimension, Q's and K's panels at shared addresses q_addr and k_addr (slice kk is 32
// bytes into a panel's rows). issue_pv: O += P V, P from registers (a, packed by
// pack_p), V's panels at v_addr read N-major. Each issues only: the caller fences
// before, commits after and waits before it reads what they write.
template <class T, int D, int Bc>
__device__ __forceinline__ void issue_scores(float (&s)[Bc / 8][4], uint32_t q_addr,
                                             uint32_t k_addr) {
  constexpr int q_panel = 64 * 64, kv_panel = Bc * 64;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t at = 32 * (kk % 4);
    wgmma_64x64_ss<T>(s, k_major_desc(q_addr + 2 * (kk / 4) * q_panel + at),
                      k_major_desc(k_addr + 2 * (kk / 4) * kv_panel + at), kk > 0);
  }
}
template <class T, int D, int Bc>
__device__ __forceinline__ void issue_pv(float (&acc)[D / 8][4],
                                         const uint32_t (&a)[Bc / 16][4],
                                         uint32_t v_addr) {
#pragma unroll
  for (int j = 0; j < Bc / 16; ++j)
    wgmma_rs<T, D>(acc, a[j], n_major_desc(v_addr + 16 * 128 * j, 2 * Bc * 64), 1);
}
// P's slice j as wgmma's A operand: S's accumulators of keys 16j..16j+15, packed to T
// (before the fence: the ISA wants one between writing a wgmma's registers and it).
template <class T, int Bc>
__device__ __forceinline__ void pack_p(const float (&s)[Bc / 8][4],
                                       uint32_t (&a)[Bc / 16][4]) {
#pragma unroll
  for (int j = 0; j < Bc / 16; ++j) {
    a[j][0] = pack2<T>(s[2 * j][0], s[2 * j][1]);
    a[j][1] = pack2<T>(s[2 * j][2], s[2 * j][3]);
    a[j][2] = pack2<T>(s[2 * j + 1][0], s[2 * j + 1][1]);
    a[j][3] = pack2<T>(s[2 * j + 1][2], s[2 * j + 1][3]);
  }
}

// When a warpgroup may issue its wgmmas: acquire() before a chain, release() once it
// is committed. AnyTime: whenever it is ready (one warpgroup, or consumers that do not
// take turns).
struct AnyTime {
  __device__ __forceinline__ void acquire() const {}
  __device__ __forceinline__ void release() const {}
};

// Chapter 8's step 6 softmax on a tile's scores s (each thread's rows g and g + 8 of
// its warp's 16 from row0): raw scores times c = scale·log2(e) in an unmasked tile
// (the caller takes every tile as masked where scale < 0, for the max of the raw
// scores to be that of the scaled ones), in a masked one put into log2 units with the
// mask here (one compare per score where the causal mask is the tile's only rule);
// then online_softmax_exp2, which rescales acc and l, and this lane's part of the
// row sums (store_rows adds the four lanes of a row): 2^(s·c − m) is an FFMA and a
// MUFU.EX2 a score, the max an FMNMX, where max_nan, the scale and exp2f took nine.
template <bool Masked, int NB, int ND>
__device__ __forceinline__ void softmax_exp2(float (&s)[NB][4], float (&acc)[ND][4],
                                             float (&m)[2], float (&l)[2],
                                             const MaskParams& mask, int b, int h,
                                             int row0, int j0, int Sq, int Sk,
                                             float scale, int lane) {
  const float c = scale * kLog2e;
  if constexpr (Masked)
    masked_scores(s, tile_causal_only(mask, b, j0 + 8 * NB, Sk), mask, b, h, row0, j0,
                  Sq, Sk, scale, c, lane);
  online_softmax_exp2(s, acc, m, l, Masked ? 1.f : c);
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int n = 0; n < NB; ++n) l[r] += s[n][2 * r] + s[n][2 * r + 1];
}

// unmasked_tiles for softmax_exp2: none where scale < 0, whose unmasked path takes
// the max of the raw scores for that of the scaled ones.
__device__ __forceinline__ void exp2_unmasked_tiles(const MaskParams& mask, int b,
                                                    int row_lo, int row_hi, int Sq,
                                                    int Sk, int kv_begin, int kv_end,
                                                    int Bc, float scale, int* u_begin,
                                                    int* u_end) {
  unmasked_tiles(mask, b, row_lo, row_hi, Sq, Sk, kv_begin, kv_end, Bc, u_begin, u_end);
  if (scale < 0.f) *u_end = *u_begin;
}

// One key tile j0..j0+Bc-1 for a warpgroup's 64 rows from row_lo: S = Q Kᵀ, the
// softmax (softmax_exp2; Masked: the tile may be partial or masked), then O += P V.
// Each chain is issued in the warpgroup's turn (`turns`). Every wgmma it issues has
// landed when it returns.
template <class T, int D, int Bc, bool Masked, class Turns = AnyTime>
__device__ __forceinline__ void attend_tile(float (&acc)[D / 8][4], float (&m)[2],
                                            float (&l)[2], uint32_t q_addr,
                                            uint32_t k_addr, uint32_t v_addr,
                                            const MaskParams& mask, int b, int h,
                                            int row_lo, int j0, int Sq, int Sk,
                                            float scale, int warp, int lane,
                                            const Turns& turns = Turns{}) {
  float s[Bc / 8][4];
  turns.acquire();
  wgmma_fence();
  issue_scores<T, D, Bc>(s, q_addr, k_addr);
  wgmma_commit();
  turns.release();
  wgmma_wait<0>();
  softmax_exp2<Masked>(s, acc, m, l, mask, b, h, row_lo + 16 * warp, j0, Sq, Sk, scale,
                       lane);
  uint32_t a[Bc / 16][4];
  pack_p<T, Bc>(s, a);
  turns.acquire();
  wgmma_fence();
  issue_pv<T, D, Bc>(acc, a, v_addr);
  wgmma_commit();
  turns.release();
  wgmma_wait<0>();
}

// The softmax of a tile's scores while O's product with the tile before is still in
// flight (step 5), so O is not to be touched yet: softmax_exp2 on S alone (its
// accumulator a stand-in), and alpha, the factor that O needs once that product has
// landed (rescale_rows), as online_softmax_exp2 computes it: 2^(m_old − m_new), with
// 0 for m_new in place of -inf.
template <bool Masked, int NB>
__device__ __forceinline__ void softmax_deferred(float (&s)[NB][4], float (&m)[2],
                                                 float (&l)[2], float (&alpha)[2],
                                                 const MaskParams& mask, int b, int h,
                                                 int row0, int j0, int Sq, int Sk,
                                                 float scale, int lane) {
  float stand_in[1][4] = {};
  const float m_old[2] = {m[0], m[1]};
  softmax_exp2<Masked>(s, stand_in, m, l, mask, b, h, row0, j0, Sq, Sk, scale, lane);
  for (int r = 0; r < 2; ++r)
    alpha[r] = exp2_approx(m_old[r] - (m[r] == -INFINITY ? 0.f : m[r]));
}
template <int ND>
__device__ __forceinline__ void rescale_rows(float (&acc)[ND][4],
                                             const float (&alpha)[2]) {
#pragma unroll
  for (int d = 0; d < ND; ++d)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[d][i] *= alpha[i / 2];
}

// TMA zero-fills only past Sk: V's rows of keys past kv_end in a partial last tile (a
// key length, a causal or window bound) arrive as they are, and P = 0 times a NaN or
// inf there would reach O. Thread t of `threads` writes zeros over rows valid..Bc-1
// of each of the tile's panels at v (a swizzled row is still 128 contiguous bytes),
// as load_tile does in step 1; then a fence, since wgmma reads through the async
// proxy. The caller's barrier stands between these writes and the readers.
template <int Panels, int Bc>
__device__ __forceinline__ void zero_rows_from(uint16_t* v, int valid, int t,
                                               int threads) {
  const int rows = Bc - valid, chunks = Panels * rows * 8;
  for (int c = t; c < chunks; c += threads) {
    const int p = c / (rows * 8), row = valid + c / 8 % rows;
    reinterpret_cast<uint4*>(v + (p * Bc + row) * 64)[c % 8] = make_uint4(0, 0, 0, 0);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The key tiles [kv_begin, kv_end) in steps of Bc, tile(j0, i, masked) for the i-th:
// those of the run [u_begin, u_end) that need no mask (unmasked_tiles) in a loop of
// their own, without mask code (the hot loop), the others masked (chapter 8, step 6).
template <int Bc, class Tile>
__device__ __forceinline__ void for_each_tile(int kv_begin, int kv_end, int u_begin,
                                              int u_end, Tile tile) {
  int i = 0;
  for (int j0 = kv_begin; j0 < kv_end;) {
    if (j0 >= u_begin && j0 < u_end) {
      for (; j0 < u_end; j0 += Bc, ++i) tile(j0, i, std::false_type{});
    } else {
      tile(j0, i++, std::true_type{});
      j0 += Bc;
    }
  }
}
