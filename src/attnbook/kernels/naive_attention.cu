// Attention as three kernels with one thread per output element and no shared memory:
//   S = mask(scale · Q Kᵀ)   [B, H, Sq, Sk]  one thread per score
//   P = softmax(S) by rows   in place        one thread per row (softmax.cuh)
//   O = P V                  [B, H, Sq, D]   one thread per output element
// The S×S matrix makes a round trip through global memory between the kernels, and every
// thread reads its operands straight from global memory: 2·D loads per score, Sk·2 loads per
// output. This is the baseline every later chapter improves on.
#include <cmath>

#include "mask.cuh"
#include "softmax.cuh"   // softmax_rows_naive: one thread per row, three passes

// Grid (ceil(Sk/16), ceil(Sq/16), B·H), block 16×16: threadIdx.x walks keys, so neighbouring
// threads write neighbouring scores (coalesced stores).
__global__ void scores_naive(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ s,
                             int H, int Hkv, int Sq, int Sk, int D, float scale, MaskParams mask) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  const int bh = blockIdx.z, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  if (i >= Sq || j >= Sk) return;
  const float* qi = q + (size_t(bh) * Sq + i) * D;
  const float* kj = k + ((size_t(b) * Hkv + hk) * Sk + j) * D;
  float dot = 0.f;
  for (int d = 0; d < D; ++d) dot += qi[d] * kj[d];
  s[(size_t(bh) * Sq + i) * Sk + j] = masked_score(mask, dot * scale, b, h, i, j, Sq, Sk);
}

// Grid (ceil(D/16), ceil(Sq/16), B·H), block 16×16: threadIdx.x walks the head dimension.
__global__ void pv_naive(const float* __restrict__ p, const float* __restrict__ v, float* __restrict__ o,
                         int H, int Hkv, int Sq, int Sk, int D) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  const int bh = blockIdx.z, b = bh / H, hk = (bh % H) / (H / Hkv);
  if (i >= Sq || d >= D) return;
  const float* pi = p + (size_t(bh) * Sq + i) * Sk;
  const float* vb = v + (size_t(b) * Hkv + hk) * Sk * D;
  float acc = 0.f;
  for (int j = 0; j < Sk; ++j) acc += pi[j] * vb[size_t(j) * D + d];
  o[(size_t(bh) * Sq + i) * D + d] = acc;
}

// s: workspace of B·H·Sq·Sk floats. (key_step is the tiled path's; here it is always 1.)
void attention_naive(const float* q, const float* k, const float* v, float* s, float* o, int B, int H,
                     int Hkv, int Sq, int Sk, int D, float scale, MaskParams mask, int /*key_step*/,
                     cudaStream_t stream) {
  const dim3 block(16, 16);
  scores_naive<<<dim3((Sk + 15) / 16, (Sq + 15) / 16, B * H), block, 0, stream>>>(q, k, s, H, Hkv, Sq, Sk, D, scale, mask);
  const int rows = B * H * Sq;
  softmax_rows_naive<<<(rows + 127) / 128, 128, 0, stream>>>(s, s, rows, Sk);   // in place
  pv_naive<<<dim3((D + 15) / 16, (Sq + 15) / 16, B * H), block, 0, stream>>>(s, v, o, H, Hkv, Sq, Sk, D);
}
