// Attention as three kernels with one thread per output element and no shared memory:
//   S = mask(scale · Q Kᵀ)   [B, H, Sq, Sk]  one thread per score
//   P = softmax(S) by rows   in place        one thread per row (softmax.cuh)
//   O = P V                  [B, H, Sq, D]   one thread per output element
// The S×S matrix makes a round trip through global memory between the kernels, and
// every thread reads its operands straight from global memory: 2·D loads per score,
// Sk·2 loads per output. This is the baseline every later chapter improves on.
#include <algorithm>
#include <cmath>

#include "mask.cuh"
#include "softmax.cuh"   // softmax_rows_naive: one thread per row, three passes
#include "three_kernels.h"   // the launcher, and the Layout and MaskParams it takes

// Grid (ceil(Sk/16), ceil(Sq/16), B·H), block 16×16: threadIdx.x walks keys, so
// neighbouring threads write neighbouring scores (coalesced stores). A launch covers
// rows from row0 and (batch, head) pairs from bh0: the host splits grids larger than
// CUDA's 65535 limit on y and z.
__global__ void scores_naive(const float* __restrict__ q, const float* __restrict__ k,
                             float* __restrict__ s, Layout lq, Layout lk, int row0,
                             int bh0, int H, int Hkv, int Sq, int Sk, int D,
                             float scale, MaskParams mask) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = row0 + blockIdx.y * blockDim.y + threadIdx.y;
  const int bh = bh0 + blockIdx.z, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  if (i >= Sq || j >= Sk) return;
  const float* qi = q + b * lq.b + h * lq.h + i * lq.s;
  const float* kj = k + b * lk.b + hk * lk.h + j * lk.s;
  float dot = 0.f;
  for (int d = 0; d < D; ++d) dot += qi[d] * kj[d];
  s[(size_t(bh) * Sq + i) * Sk + j] =
      masked_score(mask, dot * scale, b, h, i, j, Sq, Sk);
}

// Grid (ceil(D/16), ceil(Sq/16), B·H), block 16×16: threadIdx.x walks the head
// dimension.
__global__ void pv_naive(const float* __restrict__ p, const float* __restrict__ v,
                         float* __restrict__ o, Layout lv, int row0, int bh0, int H,
                         int Hkv, int Sq, int Sk, int D) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = row0 + blockIdx.y * blockDim.y + threadIdx.y;
  const int bh = bh0 + blockIdx.z, b = bh / H, hk = (bh % H) / (H / Hkv);
  if (i >= Sq || d >= D) return;
  const float* pi = p + (size_t(bh) * Sq + i) * Sk;
  const float* vb = v + b * lv.b + hk * lv.h + d;
  float acc = 0.f;
  for (int j = 0; j < Sk; ++j) acc += pi[j] * vb[j * lv.s];
  o[(size_t(bh) * Sq + i) * D + d] = acc;
}

// Calls launch(y0, z0, ny, nz) for each part of a grid of tiles_y × BH blocks in y and
// z that fits CUDA's limit of 65535 on both.
template <class Launch>
static void split_grid(long long tiles_y, long long BH, Launch launch) {
  constexpr long long kMax = 65535;
  for (long long z0 = 0; z0 < BH; z0 += kMax)
    for (long long y0 = 0; y0 < tiles_y; y0 += kMax)
      launch(int(y0), int(z0), unsigned(std::min(tiles_y - y0, kMax)),
             unsigned(std::min(BH - z0, kMax)));
}

// s: workspace of B·H·Sq·Sk floats; o: contiguous [B, H, Sq, D]. (key_step is the tiled
// path's; here it is always 1.)
void attention_naive(const float* q, const float* k, const float* v, float* s, float* o,
                     const Layout& lq, const Layout& lk, const Layout& lv, int B, int H,
                     int Hkv, int Sq, int Sk, int D, float scale, MaskParams mask,
                     int /*key_step*/, cudaStream_t stream) {
  const dim3 block(16, 16);
  const long long BH = (long long)B * H, tiles_y = (Sq + 15) / 16;
  split_grid(tiles_y, BH, [&](int y0, int z0, unsigned ny, unsigned nz) {
    scores_naive<<<dim3((Sk + 15) / 16, ny, nz), block, 0, stream>>>(
        q, k, s, lq, lk, y0 * 16, z0, H, Hkv, Sq, Sk, D, scale, mask);
  });
  const int rows = int(BH * Sq);   // the caller keeps B·H·Sq below 2^31
  // In place: the probabilities overwrite the scores.
  softmax_rows_naive<<<(rows + 127) / 128, 128, 0, stream>>>(s, s, rows, Sk);
  split_grid(tiles_y, BH, [&](int y0, int z0, unsigned ny, unsigned nz) {
    pv_naive<<<dim3((D + 15) / 16, ny, nz), block, 0, stream>>>(
        s, v, o, lv, y0 * 16, z0, H, Hkv, Sq, Sk, D);
  });
}
