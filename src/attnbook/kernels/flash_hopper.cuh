// The pieces chapter 12's Hopper forward steps share (flash_hopper_*.cuh): their
// shared memory and the work of one key tile for a warpgroup's 64 query rows.
//
// Shared memory: every tile is stored as panels of 64 columns, [rows][64] 16-bit
// elements with 128-byte rows, on 1 KiB, swizzled as wgmma's 128-byte swizzle reads
// them (chunk c of row r at chunk c XOR r % 8: chapter 8's tile_offset<64, true>, and
// what TMA's 128-byte swizzle writes). Q: [D/64][64][64]; K and V: [2][D/64][Bc][64]
// each.
#pragma once
#include "flash_tc.cuh"
#include "hopper.cuh"

// Dynamic shared memory: Q's Br rows, `Stages` buffers of K and V, and a kilobyte to
// put Q on 1 KiB whatever the base.
template <int D, int Bc, int Br = 64, int Stages = 2>
constexpr int hopper_bytes() {
  return 2 * (Br * D + 2 * Stages * Bc * D) + 1024;
}

// When a warpgroup may issue its wgmmas: acquire() before a chain, release() once it
// is committed. AnyTime: whenever it is ready (one warpgroup, or consumers that do not
// take turns).
struct AnyTime {
  __device__ __forceinline__ void acquire() const {}
  __device__ __forceinline__ void release() const {}
};

// One key tile j0..j0+Bc-1 for a warpgroup's 64 rows from row_lo (this thread's
// warp `warp` of it owns 16): S = Q Kᵀ as a chain of m64n64k16 wgmmas over the D / 16
// slices of the head dimension (Q and K panels at shared addresses q_addr and k_addr),
// the scale (and, Masked, the mask: the tile may be partial or masked), the online
// softmax, then O += P V with P from registers and V's panels at v_addr. Each chain
// is issued in the warpgroup's turn (`turns`). Every wgmma it issues has landed when
// it returns.
template <class T, int D, int Bc, bool Masked, class Turns = AnyTime>
__device__ __forceinline__ void attend_tile(float (&acc)[D / 8][4], float (&m)[2],
                                            float (&l)[2], uint32_t q_addr,
                                            uint32_t k_addr, uint32_t v_addr,
                                            const MaskParams& mask, int b, int h,
                                            int row_lo, int j0, int Sq, int Sk,
                                            float scale, int warp, int lane,
                                            const Turns& turns = Turns{}) {
  constexpr int q_panel = 64 * 64, kv_panel = Bc * 64;
  // S = Q Kᵀ: slice kk of the head dimension is 32 bytes into a panel's rows
  float s[Bc / 8][4];
  turns.acquire();
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t at = 32 * (kk % 4);
    wgmma_64x64_ss<T>(s, k_major_desc(q_addr + 2 * (kk / 4) * q_panel + at),
                      k_major_desc(k_addr + 2 * (kk / 4) * kv_panel + at), kk > 0);
  }
  wgmma_commit();
  turns.release();
  wgmma_wait<0>();
  scale_and_mask<Bc / 8, true>(s, !Masked, mask, b, h, row_lo + 16 * warp, j0, Sq, Sk,
                               scale, lane);
  online_softmax<Bc / 8, D / 8, true>(s, acc, m, l);

  // O += P V: P's slice j is S's accumulators of keys 16j..16j+15, packed as A, all
  // before the fence (the ISA wants one between writing a wgmma's registers and it)
  uint32_t a[Bc / 16][4];
#pragma unroll
  for (int j = 0; j < Bc / 16; ++j) {
    a[j][0] = pack2<T>(s[2 * j][0], s[2 * j][1]);
    a[j][1] = pack2<T>(s[2 * j][2], s[2 * j][3]);
    a[j][2] = pack2<T>(s[2 * j + 1][0], s[2 * j + 1][1]);
    a[j][3] = pack2<T>(s[2 * j + 1][2], s[2 * j + 1][3]);
  }
  turns.acquire();
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < Bc / 16; ++j)
    wgmma_rs<T, D>(acc, a[j], n_major_desc(v_addr + 16 * 128 * j, 2 * kv_panel), 1);
  wgmma_commit();
  turns.release();
  wgmma_wait<0>();
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
