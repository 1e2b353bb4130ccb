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

// Keys [*begin, *end) of sequence b for split blockIdx.x of gridDim.x: its
// cache_seqlens[b] + new_keys keys (at most the capacity; returned) cut into units of
// `unit` keys, each split a run of whole units (per sequence, since the lengths
// differ). A split past the last unit gets an empty range.
__device__ __forceinline__ long long split_keys(const KVCache& cache,
                                                const int* cache_seqlens, int new_keys,
                                                int b, int unit, int* begin, int* end) {
  const long long L = min(max((long long)cache_seqlens[b] + new_keys, 0ll),
                          (long long)cache.capacity);
  const long long units = (L + unit - 1) / unit;
  const long long per_split = (units + gridDim.x - 1) / gridDim.x;
  *begin = int(min(L, blockIdx.x * per_split * unit));
  *end = int(min(L, *begin + per_split * unit));
  return L;
}
