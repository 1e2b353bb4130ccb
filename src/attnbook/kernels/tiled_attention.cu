// Attention from the tiled building blocks of chapters 3 and 4, still as separate
// kernels with the score matrix in global memory:
//   S = Q Kᵀ                  GEMM_NT, register-blocked (gemm.cuh)
//   S = mask(scale · S)       one thread per score, in place (below)
//   P = softmax(S)            online softmax, one block per row, in place (softmax.cuh)
//   O = P V                   GEMM_NN, register-blocked
//
// Strided attention (chapter 5) gathers instead of masking: with key_step = stride, the
// GEMMs read only keys 0, stride, 2·stride, … (a row pitch of stride·D), so S has
// ceil(Sk/stride) columns and every step does 1/stride of the dense work. Score column
// c stands for key c·key_step, which is what the mask is asked about.
#include <algorithm>
#include <cmath>

#include "gemm.cuh"
#include "mask.cuh"
#include "softmax.cuh"
#include "three_kernels.h"   // the launcher, and the Layout and MaskParams it takes

// s: [B·H, Sq, Sc] scores of keys j = c·key_step. Grid-stride over all of them.
__global__ void scale_mask(float* s, int H, int Sq, int Sk, int Sc, int key_step,
                           float scale, MaskParams mask, long long total) {
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    const int c = idx % Sc, i = (idx / Sc) % Sq, bh = idx / ((long long)Sc * Sq);
    s[idx] =
        masked_score(mask, s[idx] * scale, bh / H, bh % H, i, c * key_step, Sq, Sk);
  }
}

// s: workspace of B·H·Sq·ceil(Sk/key_step) floats; key_step = 1 for the dense path. q,
// k, v and o are contiguous: a GEMM batch is one distance apart in memory, so the
// caller copies other layouts (the Layout arguments serve the naive path, which shares
// this signature).
void attention_tiled(const float* q, const float* k, const float* v, float* s, float* o,
                     const Layout&, const Layout&, const Layout&, int B, int H, int Hkv,
                     int Sq, int Sk, int D, float scale, MaskParams mask, int key_step,
                     cudaStream_t stream) {
  const int Sc = (Sk + key_step - 1) / key_step, BH = B * H, group = H / Hkv;
  const Gemm qk{q, k, s, Sq, Sc, D, D, D * key_step, Sc,
                (long long)Sq * D, (long long)Sk * D, (long long)Sq * Sc, group};
  gemm_launch<true>(qk, BH, 4, stream);
  const long long total = (long long)BH * Sq * Sc;
  const int blocks = int(std::min<long long>((total + 255) / 256, 65535));
  if (total > 0)
    scale_mask<<<blocks, 256, 0, stream>>>(s, H, Sq, Sk, Sc, key_step, scale, mask,
                                           total);
  softmax_rows(s, s, BH * Sq, Sc, stream);
  const Gemm pv{s, v, o, Sq, D, Sc, Sc, D * key_step, D,
                (long long)Sq * Sc, (long long)Sk * D, (long long)Sq * D, group};
  gemm_launch<false>(pv, BH, 4, stream);
}
