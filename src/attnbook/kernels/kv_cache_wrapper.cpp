// torch.ops.attnbook.kv_cache_append's C++ side (ops/kv_cache.py): checks the tensors
// and launches chapter 9's append kernel (kv_cache.cu), which writes into the caches in
// place.
#include "attnbook_torch.h"   // first: torch's names before the kernels' structs
#include "kv_cache.h"
#include "wrapper_args.h"

void append(at::Tensor k_cache, at::Tensor v_cache, at::Tensor k, at::Tensor v,
            at::Tensor cache_seqlens, at::Tensor block_table) {
  const at::ScalarType dtype = k_cache.scalar_type();
  const Layout lk = layout_of(k, "k", dtype), lv = layout_of(v, "v", dtype);
  const int64_t B = k.size(0), Hkv = k.size(1), Sn = k.size(2), D = k.size(3);
  TORCH_CHECK(k.sizes() == v.sizes() && Hkv == k_cache.size(1) && D == k_cache.size(3),
              "k and v must be [B, Hkv, Sn, D] with the caches' Hkv and D");
  TORCH_CHECK(B <= INT32_MAX && Hkv <= INT32_MAX && Sn <= INT32_MAX && D <= INT32_MAX,
              "k and v are too large");
  const KVCache cache = kv_cache_of(k_cache, v_cache, block_table, B);
  attnbook::check_tensor(cache_seqlens, "cache_seqlens", at::kInt);
  TORCH_CHECK(cache_seqlens.numel() == B, "cache_seqlens must be [B]");
  attnbook::DeviceGuard guard(k_cache);
  TORCH_CHECK(kv_cache_append(int(k_cache.element_size()), k.data_ptr(), v.data_ptr(),
                              lk, lv, k_cache.data_ptr(), v_cache.data_ptr(), cache,
                              cache_seqlens.data_ptr<int>(), int(B), int(Hkv), int(Sn),
                              int(D), attnbook::stream()),
              "no append kernel for ", dtype);
  attnbook::check_launch();
}
