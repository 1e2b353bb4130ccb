// Fused attention forward in fp32 (FlashAttention-2's schedule): softmax(q kᵀ · scale +
// mask) v without ever storing the Sq x Sk score matrix. Chapter 7's steps, behind one
// launcher:
//   1 a thread per query row, K and V tiles in shared memory   (this file)
//   2 register tiles of 4 x 4, 16-byte loads, swizzled   (flash_fp32_2_register_tiles)
//   3 step 2 sized for occupancy, 4 blocks an SM at D = 64   (flash_fp32_3_occupancy)
//
// Step 1. Grid: (ceil(Sq / Br), B·H) in launches of at most 65535 (batch, head) pairs
// (bh0 is the first pair of a launch). A block owns Br consecutive query rows of one
// (batch, head); thread r owns row r: its query and its output accumulator live in
// registers, with the row's running max m and running sum l (the online softmax). K
// and V stream through shared memory in tiles of Bc keys, so each key/value element is
// read from global memory once per block, not once per query: global traffic is
// O(Sq·D + (Sq/Br)·Sk·D) instead of O(Sq·Sk).
//
// Invariant after each tile: acc = Σ_j exp(s_j − m) v_j and l = Σ_j exp(s_j − m) over
// the keys seen so far, with m their largest score; a new tile rescales both by
// exp(m_old − m_new).
//
// Masks (mask.cuh): the block loads only the key tiles that some of its rows may attend
// (causal: none above the diagonal; window: none outside the band; key padding: none
// past the length), and evaluates the mask per element only in tiles that are not
// entirely admitted (for causal: the tiles that cross the diagonal).
//
// NaN and inf: a NaN or +inf score makes its row NaN (max_nan, and exp(inf - inf) =
// NaN), as in SDPA; a key whose score is -inf (masked) is skipped, so its k and v are
// never used.
#include <algorithm>
#include <cmath>

#include "flash_fp32.h"   // the launcher, and the Layout and MaskParams it takes
#include "flash_fp32_2_register_tiles.cuh"
#include "flash_fp32_3_occupancy.cuh"
#include "mask.cuh"
#include "max_nan.cuh"

template <int D, int Br, int Bc>
__global__ void flash_fwd_fp32_kernel(const float* __restrict__ q,
                                      const float* __restrict__ k,
                                      const float* __restrict__ v,
                                      float* __restrict__ o, float* __restrict__ lse,
                                      Layout lq, Layout lk, Layout lv, int bh0, int H,
                                      int Hkv, int Sq, int Sk, float scale,
                                      MaskParams mask) {
  __shared__ float Ks[Bc][D];
  __shared__ float Vs[Bc][D];
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  const int row = row_lo + threadIdx.x;
  const bool active = row < Sq;
  const float* qr_ = q + b * lq.b + h * lq.h + row * lq.s;
  const float* kb = k + b * lk.b + hk * lk.h;
  const float* vb = v + b * lv.b + hk * lv.h;

  float qr[D], acc[D];
  for (int d = 0; d < D; ++d) {
    qr[d] = active ? qr_[d] * scale : 0.f;
    acc[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;

  int kv_begin, kv_end;   // the same for every thread of the block: the barriers match
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  for (int j0 = kv_begin; j0 < kv_end; j0 += Bc) {
    // Consecutive threads load consecutive d: coalesced.
    for (int idx = threadIdx.x; idx < Bc * D; idx += Br) {
      const int r = idx / D, d = idx % D, key = j0 + r;
      Ks[r][d] = key < Sk ? kb[key * lk.s + d] : 0.f;
      Vs[r][d] = key < Sk ? vb[key * lv.s + d] : 0.f;
    }
    __syncthreads();   // the tile is complete before anyone reads it
    if (active) {
      const bool unmasked = tile_unmasked(mask, b, row_lo, row_hi, j0, j0 + Bc, Sq, Sk);
      float s[Bc], m_new = m;
      for (int jj = 0; jj < Bc; ++jj) {
        float dot = 0.f;
        for (int d = 0; d < D; ++d) dot += qr[d] * Ks[jj][d];
        const int j = j0 + jj;
        s[jj] = unmasked   ? dot
                : j < Sk   ? masked_score(mask, dot, b, h, row, j, Sq, Sk)
                           : -INFINITY;
        m_new = max_nan(m_new, s[jj]);
      }
      if (m_new != -INFINITY) {   // else every key so far is masked: nothing to add
        const float alpha = __expf(m - m_new);   // 0 on the first admitted tile
        l *= alpha;
        for (int d = 0; d < D; ++d) acc[d] *= alpha;
        for (int jj = 0; jj < Bc; ++jj) {
          if (s[jj] == -INFINITY) continue;   // masked: no part in o, not even 0·v
          const float p = __expf(s[jj] - m_new);
          l += p;
          for (int d = 0; d < D; ++d) acc[d] += p * Vs[jj][d];
        }
        m = m_new;
      }
    }
    __syncthreads();   // all are done with the tile before the next load overwrites it
  }
  if (active) {
    const float inv = l == 0.f ? 0.f : 1.f / l;   // a row with no admitted key: zeros
    for (int d = 0; d < D; ++d) o[((size_t(bh) * Sq) + row) * D + d] = acc[d] * inv;
    lse[size_t(bh) * Sq + row] = l == 0.f ? -INFINITY : m + logf(l);
  }
}

// o: contiguous [B, H, Sq, D]; lse: contiguous [B, H, Sq].
template <int D, int Br, int Bc>
static void launch(const float* q, const float* k, const float* v, float* o, float* lse,
                   const Layout& lq, const Layout& lk, const Layout& lv, int B, int H,
                   int Hkv, int Sq, int Sk, float scale, const MaskParams& mask,
                   cudaStream_t stream) {
  const long long BH = (long long)B * H;
  for (long long bh0 = 0; bh0 < BH; bh0 += 65535) {   // gridDim.y is at most 65535
    const dim3 grid((Sq + Br - 1) / Br, unsigned(std::min(BH - bh0, 65535ll)));
    flash_fwd_fp32_kernel<D, Br, Bc><<<grid, Br, 0, stream>>>(
        q, k, v, o, lse, lq, lk, lv, int(bh0), H, Hkv, Sq, Sk, scale, mask);
  }
}

// Step 2 (Occupancy false) or step 3 at head dimension D: a block per 64 query rows,
// past 48 KB of shared memory by opt-in.
template <int D, bool Occupancy>
static void launch_regtile(const float* q, const float* k, const float* v, float* o,
                           float* lse, const Layout& lq, const Layout& lk,
                           const Layout& lv, int B, int H, int Hkv, int Sq, int Sk,
                           float scale, const MaskParams& mask, cudaStream_t stream) {
  constexpr int bytes = Occupancy ? occupancy_smem_bytes<D>() : regtile_smem_bytes<D>();
  if (bytes > 48 * 1024)   // a launch past the device's limit reports the error
    cudaFuncSetAttribute(Occupancy ? flash_fwd_fp32_occupancy_kernel<D>
                                   : flash_fwd_fp32_regtile_kernel<D>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  const long long BH = (long long)B * H;
  for (long long bh0 = 0; bh0 < BH; bh0 += 65535) {   // gridDim.y is at most 65535
    const dim3 grid((Sq + kRtBr - 1) / kRtBr, unsigned(std::min(BH - bh0, 65535ll)));
    if constexpr (Occupancy)
      flash_fwd_fp32_occupancy_kernel<D><<<grid, kRtThreads, bytes, stream>>>(
          q, k, v, o, lse, lq, lk, lv, int(bh0), H, Hkv, Sq, Sk, scale, mask);
    else
      flash_fwd_fp32_regtile_kernel<D><<<grid, kRtThreads, bytes, stream>>>(
          q, k, v, o, lse, lq, lk, lv, int(bh0), H, Hkv, Sq, Sk, scale, mask);
  }
}

// The compiled configurations: step 1 with (Br, Bc) = (64, 32) for every head dimension
// and chapter 7's tile sweep at D = 64; steps 2 and 3 with (64, 64) for every head
// dimension.
// Returns false for any other configuration.
bool flash_fwd_fp32(const float* q, const float* k, const float* v, float* o,
                    float* lse, const Layout& lq, const Layout& lk, const Layout& lv,
                    int B, int H, int Hkv, int Sq, int Sk, int D, int step, int Br,
                    int Bc, float scale, const MaskParams& mask, cudaStream_t stream) {
#define ATTNBOOK_FLASH_CONFIG(d, br, bc)                                            \
  if (step == 1 && D == d && Br == br && Bc == bc) {                                \
    launch<d, br, bc>(q, k, v, o, lse, lq, lk, lv, B, H, Hkv, Sq, Sk, scale, mask,  \
                      stream);                                                      \
    return true;                                                                    \
  }
  ATTNBOOK_FLASH_CONFIG(32, 64, 32)
  ATTNBOOK_FLASH_CONFIG(64, 64, 32)
  ATTNBOOK_FLASH_CONFIG(96, 64, 32)
  ATTNBOOK_FLASH_CONFIG(128, 64, 32)
  ATTNBOOK_FLASH_CONFIG(64, 32, 16)
  ATTNBOOK_FLASH_CONFIG(64, 32, 32)
  ATTNBOOK_FLASH_CONFIG(64, 32, 64)
  ATTNBOOK_FLASH_CONFIG(64, 64, 16)
  ATTNBOOK_FLASH_CONFIG(64, 64, 64)
  ATTNBOOK_FLASH_CONFIG(64, 128, 16)
  ATTNBOOK_FLASH_CONFIG(64, 128, 32)
  ATTNBOOK_FLASH_CONFIG(64, 128, 64)
#undef ATTNBOOK_FLASH_CONFIG
#define ATTNBOOK_REGTILE_CONFIG(d)                                                  \
  if ((step == 2 || step == 3) && D == d && Br == kRtBr && Bc == kRtBc) {          \
    (step == 2 ? launch_regtile<d, false> : launch_regtile<d, true>)(               \
        q, k, v, o, lse, lq, lk, lv, B, H, Hkv, Sq, Sk, scale, mask, stream);       \
    return true;                                                                    \
  }
  ATTNBOOK_REGTILE_CONFIG(32)
  ATTNBOOK_REGTILE_CONFIG(64)
  ATTNBOOK_REGTILE_CONFIG(96)
  ATTNBOOK_REGTILE_CONFIG(128)
#undef ATTNBOOK_REGTILE_CONFIG
  return false;
}
