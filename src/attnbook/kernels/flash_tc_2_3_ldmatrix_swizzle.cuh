// Steps 2 and 3: fragments by ldmatrix. One ldmatrix.x4 gives each lane its share of
// four 8x8 matrices: lanes 0-7, 8-15, 16-23, 24-31 name the rows of matrix 0, 1, 2, 3
// (16 bytes each), and the hardware delivers every lane the two elements the mma wants
// from each, 4 instructions where step 1 issued 16 loads; .trans delivers V's columns.
// The kernel is step 1's; only the fragment loads change (and with Swizzle = true,
// step 3, where every tile lives in shared memory: see tile_offset).
#pragma once
#include "flash_tc_1_mma.cuh"

template <bool Swizzle>
struct LdmatrixFragments {
  static constexpr bool kSwizzle = Swizzle;

  // A: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = a[0..3].
  template <int W>
  static __device__ void load_a(uint32_t* a, const uint16_t* s, int r0, int k0,
                                int lane) {
    ldmatrix<4>(a, s + tile_offset<W, Swizzle>(r0 + lane % 16, k0 + lane / 16 * 8));
  }
  // B = sᵀ for n-tiles n0 and n0 + 8: rows n0.. of s at columns k0 and k0 + 8 are
  // b[0], b[1]; rows n0 + 8.. are b[2], b[3].
  template <int W>
  static __device__ void load_b_rows(uint32_t* b, const uint16_t* s, int n0, int k0,
                                     int lane) {
    const int row = n0 + lane % 8 + lane / 16 * 8, col = k0 + lane / 8 % 2 * 8;
    ldmatrix<4>(b, s + tile_offset<W, Swizzle>(row, col));
  }
  // B = s for n-tiles n0 and n0 + 8, transposed on the way: rows k0..k0 + 15 of s at
  // column n0 are b[0], b[1], at column n0 + 8 b[2], b[3].
  template <int W>
  static __device__ void load_b_cols(uint32_t* b, const uint16_t* s, int k0, int n0,
                                     int lane) {
    const int row = k0 + lane % 16, col = n0 + lane / 16 * 8;
    ldmatrix<4, true>(b, s + tile_offset<W, Swizzle>(row, col));
  }
};
