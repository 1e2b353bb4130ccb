// Where the keys and values of a sequence live: a contiguous cache [B, Hkv, max_len, D]
// (sequence b owns row b, position p sits at slot p), or a paged cache, a pool of pages
// [num_blocks, Hkv, block_size, D] and a block table [B, max_blocks] whose entry
// (b, p / block_size) names the page that holds position p of sequence b, at slot
// p % block_size. Plain data: the C++ wrappers, compiled without CUDA, fill it in.
#pragma once
#include "layout.h"

struct KVCache {
  Layout k, v;                       // the two caches' strides; .b steps a row or page
  const int* block_table = nullptr;  // [B, max_blocks]; nullptr: a contiguous cache
  long long table_stride = 0;        // elements between rows of the block table
  int block_size = 0;                // positions per page (contiguous: max_len)
  int num_pages = 0;                 // pages in the pool (contiguous: B)
  int capacity = 0;                  // positions one sequence can hold
};
