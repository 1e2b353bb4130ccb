// Where the keys and values of a sequence live: a contiguous cache [B, Hkv, max_len, D]
// (sequence b owns row b, position p sits at slot p), or a paged cache, a pool of pages
// [num_blocks, Hkv, block_size, D] and a block table [B, max_blocks] whose entry
// (b, p / block_size) names the page that holds position p of sequence b, at slot
// p % block_size. Plain data: the C++ wrappers, compiled without CUDA, fill it in,
// and call the append kernel's launcher (kv_cache.cu), declared below.
#pragma once
#include <cuda_runtime.h>

#include "layout.h"

struct KVCache {
  Layout k, v;                       // the two caches' strides; .b steps a row or page
  const int* block_table = nullptr;  // [B, max_blocks]; nullptr: a contiguous cache
  long long table_stride = 0;        // elements between rows of the block table
  int block_size = 0;                // positions per page (contiguous: max_len)
  int num_pages = 0;                 // pages in the pool (contiguous: B)
  int capacity = 0;                  // positions one sequence can hold
};

// Writes k_new, v_new [B, Hkv, Sn, D] (strides lk, lv) at positions cache_seqlens[b] …
// cache_seqlens[b] + Sn − 1 of each sequence's cache. element_size: 4 (fp32) or 2
// (fp16, bf16) bytes; returns false for any other.
bool kv_cache_append(int element_size, const void* k_new, const void* v_new,
                     const Layout& lk, const Layout& lv, void* k_cache, void* v_cache,
                     const KVCache& cache, const int* cache_seqlens, int B, int Hkv,
                     int Sn, int D, cudaStream_t stream);
