// The host launchers of the two three-kernel paths (scores, softmax, P·V): chapter 2's
// naive one (naive_attention.cu) and chapter 4's tiled one (tiled_attention.cu). One
// signature, so that one wrapper serves both. Host code only: the wrappers, compiled
// without CUDA, include it too.
#pragma once
#include <cuda_runtime.h>

#include "layout.h"
#include "mask_params.h"

// q, k, v: [B, H or Hkv, Sq or Sk, D] with strides lq, lk, lv (the tiled path takes
// contiguous ones); o: contiguous [B, H, Sq, D]; s: a workspace of
// B·H·Sq·ceil(Sk / key_step) floats for the scores. key_step: every key_step-th key
// (strided attention gathered, chapter 5), 1 for all of them.
void attention_naive(const float* q, const float* k, const float* v, float* s, float* o,
                     const Layout& lq, const Layout& lk, const Layout& lv, int B, int H,
                     int Hkv, int Sq, int Sk, int D, float scale, MaskParams mask,
                     int key_step, cudaStream_t stream);
void attention_tiled(const float* q, const float* k, const float* v, float* s, float* o,
                     const Layout& lq, const Layout& lk, const Layout& lv, int B, int H,
                     int Hkv, int Sq, int Sk, int D, float scale, MaskParams mask,
                     int key_step, cudaStream_t stream);
