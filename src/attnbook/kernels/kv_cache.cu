// Appending to a KV cache: the keys and values of the new tokens, [B, Hkv, Sn, D] each,
// are written at positions cache_seqlens[b] … cache_seqlens[b] + Sn − 1, each sequence
// at its own length, into a contiguous cache or through a block table into pages
// (kv_cache.h).
//
// A copy: the kernel moves bits, so it is templated on the element size alone (4 bytes
// for fp32, 2 for fp16 and bf16). One thread per element, consecutive threads on
// consecutive d: a warp reads and writes consecutive elements of one key, so every
// access is coalesced, whatever page the key lands in. Traffic: the 2·B·Hkv·Sn·D new
// elements, read once and written once; the rest of the cache is not touched.
#include <algorithm>
#include <cstdint>

#include "kv_cache.cuh"
#include "layout.h"

template <class Bits>
__global__ void kv_cache_append_kernel(const Bits* __restrict__ k_new,
                                       const Bits* __restrict__ v_new, Layout lk,
                                       Layout lv, Bits* __restrict__ k_cache,
                                       Bits* __restrict__ v_cache, KVCache cache,
                                       const int* __restrict__ cache_seqlens, int Hkv,
                                       int Sn, int D, long long n) {
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += step) {
    const int d = int(idx % D), s = int(idx / D % Sn);
    const long long bh = idx / D / Sn;
    const int h = int(bh % Hkv), b = int(bh / Hkv);
    int page, slot;
    if (!kv_slot(cache, b, (long long)cache_seqlens[b] + s, &page, &slot)) continue;
    k_cache[kv_offset(cache.k, page, h, slot) + d] =
        k_new[b * lk.b + h * lk.h + s * lk.s + d];
    v_cache[kv_offset(cache.v, page, h, slot) + d] =
        v_new[b * lv.b + h * lv.h + s * lv.s + d];
  }
}

template <class Bits>
static void launch(const void* k_new, const void* v_new, const Layout& lk,
                   const Layout& lv, void* k_cache, void* v_cache, const KVCache& cache,
                   const int* cache_seqlens, int B, int Hkv, int Sn, int D,
                   cudaStream_t stream) {
  const long long n = (long long)B * Hkv * Sn * D;
  if (n == 0) return;
  const int threads = 256;
  const long long blocks = std::min((n + threads - 1) / threads, 1ll << 20);
  kv_cache_append_kernel<Bits><<<unsigned(blocks), threads, 0, stream>>>(
      static_cast<const Bits*>(k_new), static_cast<const Bits*>(v_new), lk, lv,
      static_cast<Bits*>(k_cache), static_cast<Bits*>(v_cache), cache, cache_seqlens,
      Hkv, Sn, D, n);
}

// k_new, v_new: [B, Hkv, Sn, D] with strides lk, lv; element_size: 4 or 2 bytes (false
// for any other).
bool kv_cache_append(int element_size, const void* k_new, const void* v_new,
                     const Layout& lk, const Layout& lv, void* k_cache, void* v_cache,
                     const KVCache& cache, const int* cache_seqlens, int B, int Hkv,
                     int Sn, int D, cudaStream_t stream) {
  if (element_size == 4)
    launch<uint32_t>(k_new, v_new, lk, lv, k_cache, v_cache, cache, cache_seqlens, B,
                     Hkv, Sn, D, stream);
  else if (element_size == 2)
    launch<uint16_t>(k_new, v_new, lk, lv, k_cache, v_cache, cache, cache_seqlens, B,
                     Hkv, Sn, D, stream);
  else
    return false;
  return true;
}
