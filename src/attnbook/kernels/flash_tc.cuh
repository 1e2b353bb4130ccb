// Building blocks of chapter 8's tensor-core attention kernels (fp16 and bf16 in, fp32
// accumulators), shared by every step of the chapter.
//
// Work split: a block owns Br = 16·Warps query rows of one (batch, head); warp w owns
// rows 16w..16w+15 of them, the M dimension of one m16n8k16 mma. Tiles in shared memory
// are row-major [rows][W] arrays of 16-bit elements (the bits of T), W a multiple of 8.
//
// Fragments (the PTX ISA's layouts, g = lane / 4, t = lane % 4): an accumulator tile of
// 16 rows x 8 columns lives as c[4] per lane, c[i] at row g + 8·(i / 2), column
// 2t + i % 2. A score tile of Bc keys is s[Bc / 8][4]: each lane holds two columns of
// rows g and g + 8 in every 8-key slice, so a row's max and sum are reduced over the
// four lanes t = 0..3 with two shuffles.
#pragma once
#include <cstdint>
#include <type_traits>

#include "layout.h"
#include "mask.cuh"
#include "max_nan.cuh"
#include "tensor_core.cuh"

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Two floats rounded to T, packed in one register (the first in the low half): the
// operand format of mma.sync.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

// c += a b for one 16x8 tile with k = 16 (two m16n8k8 on sm_75, see tensor_core.cuh).
template <class T>
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a,
                                         const uint32_t* b) {
  if constexpr (std::is_same_v<T, __half>)
    mma_m16n8k16_f16(c, a, b, c);
  else
    mma_m16n8k16_bf16(c, a, b, c);
}

// Where element (row, col) of a [rows][W] tile lives. Unswizzled, the eight rows an
// ldmatrix reads at one column sit W·2 bytes apart: for W = 64 that is 128 bytes, the
// same four banks for all eight rows (an 8-way conflict). Swizzled, the 16-byte chunk c
// of a row is stored at chunk c XOR f(row), f spreading every 8 consecutive rows over 8
// different 16-byte bank groups: conflict-free, at the price of one XOR per address.
template <int W, bool Swizzle>
__device__ __forceinline__ int tile_offset(int row, int col) {
  constexpr int chunks = W / 8;   // 16-byte chunks per row
  int chunk = col / 8;
  if constexpr (Swizzle && chunks >= 8)
    chunk ^= row & 7;
  else if constexpr (Swizzle)
    chunk ^= (row / (8 / chunks)) & (chunks - 1);   // rows narrower than 128 bytes
  return row * W + chunk * 8 + col % 8;
}

// Rows [0, Rows) of a tile: global row r at g + r·ld (ld in elements, a multiple of 8,
// g 16-byte aligned: the launcher checks), W elements each. The block's Threads threads
// copy 16-byte chunks, consecutive threads consecutive chunks of a row (coalesced);
// rows from `valid` on are zero. The kernels pass the end of the block's admitted keys
// (past Sk or the key length), so a V row there is 0, never 0·NaN in P·V. Async:
// cp.async on sm_80+ (the caller commits and waits), a plain copy elsewhere.
template <int Rows, int W, bool Swizzle, int Threads, bool Async, class T>
__device__ __forceinline__ void load_tile(uint16_t* s, const T* g, long long ld,
                                          int valid) {
  constexpr int chunks = W / 8;
  for (int idx = threadIdx.x; idx < Rows * chunks; idx += Threads) {
    const int r = idx / chunks, c = idx % chunks;
    uint16_t* dst = s + tile_offset<W, Swizzle>(r, c * 8);
    if (r >= valid)
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    else if constexpr (Async)
      cp_async_16(dst, g + r * ld + c * 8);
    else
      *reinterpret_cast<uint4*>(dst) =
          *reinterpret_cast<const uint4*>(g + r * ld + c * 8);
  }
}

// Raw dot products -> scores in the exponent's units: scale·q·k (+ the mask, -inf where
// a key is not admitted or past the end, or the row past the end), times log2(e) when
// the exponent is exp2. `unmasked`: the whole tile is admitted (tile_unmasked).
template <int NB, bool Exp2>
__device__ __forceinline__ void scale_and_mask(float (&s)[NB][4], bool unmasked,
                                               const MaskParams& mask, int b, int h,
                                               int row0, int j0, int Sq, int Sk,
                                               float scale, int lane) {
  const float unit = Exp2 ? kLog2e : 1.f;
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (unmasked) {
        s[n][i] *= scale * unit;
        continue;
      }
      const int row = row0 + lane / 4 + 8 * (i / 2);
      const int j = j0 + 8 * n + 2 * (lane % 4) + i % 2;
      s[n][i] = row < Sq && j < Sk
                    ? masked_score(mask, s[n][i] * scale, b, h, row, j, Sq, Sk) * unit
                    : -INFINITY;
    }
}

template <bool Exp2>
__device__ __forceinline__ float exp_(float x) {
  return Exp2 ? exp2f(x) : __expf(x);
}

// The online softmax on fragments (chapter 6's invariant, per row r of g and g + 8):
// scores become p = exp(s − m_new) in place, acc and the lane's partial sum l are
// rescaled by exp(m_old − m_new). m is the row's max over the four lanes; l stays a
// per-lane partial sum until the end. A row whose keys are all masked so far keeps
// m = -inf and adds nothing; NaN and +inf make the row NaN, as in PyTorch.
template <int NB, int ND, bool Exp2>
__device__ __forceinline__ void online_softmax(float (&s)[NB][4], float (&acc)[ND][4],
                                               float (&m)[2], float (&l)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = m[r];
#pragma unroll
    for (int n = 0; n < NB; ++n)
      mx = max_nan(mx, max_nan(s[n][2 * r], s[n][2 * r + 1]));
    mx = max_nan(mx, __shfl_xor_sync(kFullWarp, mx, 1));
    mx = max_nan(mx, __shfl_xor_sync(kFullWarp, mx, 2));
    const float base = mx == -INFINITY ? 0.f : mx;   // exp(-inf − base) = 0, not NaN
    const float alpha = exp_<Exp2>(m[r] - base);
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
      for (int i = 2 * r; i < 2 * r + 2; ++i) {
        s[n][i] = exp_<Exp2>(s[n][i] - base);
        sum += s[n][i];
      }
    l[r] = l[r] * alpha + sum;
#pragma unroll
    for (int d = 0; d < ND; ++d) {
      acc[d][2 * r] *= alpha;
      acc[d][2 * r + 1] *= alpha;
    }
    m[r] = mx;
  }
}

// The warp's probabilities P (16 x Bc, as T) into its [16][Bc] slice of shared memory.
template <class T, int Bc, bool Swizzle, int NB>
__device__ __forceinline__ void store_p(uint16_t* p, const float (&s)[NB][4],
                                        int lane) {
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = lane / 4 + 8 * r, col = 8 * n + 2 * (lane % 4);
      const int off = tile_offset<Bc, Swizzle>(row, col);
      *reinterpret_cast<uint32_t*>(p + off) = pack2<T>(s[n][2 * r], s[n][2 * r + 1]);
    }
}

// o = acc / l for the warp's rows (zeros where no key was admitted: l = 0, whatever 0·v
// gave), as T into o ([Sq, D] of this (batch, head)), and the log-sum-exp m + log l
// (natural units; -inf for an empty row) into lse. l: each lane's partial sums of rows
// g and g + 8 (LanePartial, added over the four lanes here) or the whole sums.
template <class T, int ND, bool Exp2, bool LanePartial = true>
__device__ __forceinline__ void store_rows(const float (&acc)[ND][4],
                                           const float (&m)[2], const float (&l)[2],
                                           T* o, float* lse, int row0, int Sq,
                                           int lane) {
  constexpr int D = 8 * ND;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    if (LanePartial) {
      sum += __shfl_xor_sync(kFullWarp, sum, 1);
      sum += __shfl_xor_sync(kFullWarp, sum, 2);
    }
    const int row = row0 + lane / 4 + 8 * r;
    if (row >= Sq) continue;
    const float inv = sum == 0.f ? 0.f : 1.f / sum;
#pragma unroll
    for (int d = 0; d < ND; ++d) {
      const float x = sum == 0.f ? 0.f : acc[d][2 * r] * inv;
      const float y = sum == 0.f ? 0.f : acc[d][2 * r + 1] * inv;
      *reinterpret_cast<uint32_t*>(o + size_t(row) * D + 8 * d + 2 * (lane % 4)) =
          pack2<T>(x, y);
    }
    if (lane % 4 == 0)
      lse[row] = sum == 0.f ? -INFINITY
                 : Exp2     ? (m[r] + log2f(sum)) * kLn2
                            : m[r] + logf(sum);
  }
}
