// The host launcher of chapter 9's decoding attention (decode.cu). Host code only: the
// wrapper, compiled without CUDA, includes it too.
#pragma once
#include <cuda_runtime.h>

#include "kv_cache.h"
#include "layout.h"

// dtype: 0 float32, 1 float16, 2 bfloat16. q: [B, H, Sq, D] with strides lq, against
// the first cache_seqlens[b] + new_keys positions of sequence b's cache. o: contiguous
// [B, H, Sq, D] of q's dtype; lse: float [B, H, Sq]. num_splits > 1: split-K, with
// o_part [num_splits, B·H·Sq, D] and lse_part [num_splits, B·H·Sq] as the workspace.
// Returns false for a head dimension or dtype that is not compiled.
bool decode_attention(int dtype, const void* q, const Layout& lq, const void* k_cache,
                      const void* v_cache, const KVCache& cache,
                      const int* cache_seqlens, int new_keys, void* o, float* o_part,
                      float* lse, float* lse_part, int B, int H, int Hkv, int Sq, int D,
                      int num_splits, float scale, bool causal, cudaStream_t stream);
