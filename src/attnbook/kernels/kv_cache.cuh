// The address arithmetic of the KV-cache kernels (kv_cache.cu writes, decode.cu reads).
#pragma once
#include "kv_cache.h"

// The page and slot of position pos of sequence b; false if pos is outside the
// sequence's capacity or its page outside the pool. The host refuses such inputs before
// any launch; the kernels check again, so that no input, however it arrives, makes them
// touch memory outside the caches.
__device__ __forceinline__ bool kv_slot(const KVCache& c, int b, long long pos,
                                        int* page, int* slot) {
  if (pos < 0 || pos >= c.capacity) return false;
  *page = b;   // contiguous: row b, slot pos
  *slot = int(pos);
  if (c.block_table) {
    *page = c.block_table[b * c.table_stride + pos / c.block_size];
    *slot = int(pos % c.block_size);
  }
  return *page >= 0 && *page < c.num_pages;
}

// Element offset of (page, head h, slot, d = 0) in a cache with strides l.
__device__ __forceinline__ long long kv_offset(const Layout& l, int page, int h,
                                               int slot) {
  return page * l.b + h * l.h + slot * l.s;
}
