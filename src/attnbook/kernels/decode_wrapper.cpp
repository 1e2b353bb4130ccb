// torch.ops.attnbook.decode_attention's C++ side (ops/decode.py): checks the tensors
// and launches chapter 9's decoding attention (decode.cu), split-K or not.
#include "attnbook_torch.h"   // first: torch's names before the kernels' structs
#include "decode.h"
#include "wrapper_args.h"

// o: a new contiguous [B, H, Sq, D] of q's dtype; lse: a new float [B, H, Sq] (-inf for
// a row with no key).
std::vector<at::Tensor> decode(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache,
                               at::Tensor cache_seqlens, at::Tensor block_table,
                               int64_t new_keys, int64_t num_splits, bool causal,
                               double scale) {
  const at::ScalarType dtype = q.scalar_type();
  const int code = dtype == at::kFloat ? 0 : dtype == at::kHalf ? 1
                 : dtype == at::kBFloat16 ? 2 : -1;
  TORCH_CHECK(code >= 0, "q must be float32, float16 or bfloat16, got ", dtype);
  const Layout lq = layout_of(q, "q", dtype);
  const int64_t B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3);
  TORCH_CHECK(k_cache.scalar_type() == dtype, "the caches must have q's dtype");
  const KVCache cache = kv_cache_of(k_cache, v_cache, block_table, B);
  const int64_t Hkv = k_cache.size(1);
  TORCH_CHECK(k_cache.size(3) == D, "the caches must have q's head_dim");
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0, "query heads must be a multiple of kv heads");
  TORCH_CHECK(B * Hkv <= INT32_MAX && H * Sq <= INT32_MAX, "too many heads or rows");
  TORCH_CHECK(num_splits >= 1 && num_splits <= 128, "num_splits must be in [1, 128]");
  TORCH_CHECK(new_keys >= 0 && new_keys <= INT32_MAX, "new_keys must be in [0, 2^31)");
  attnbook::check_tensor(cache_seqlens, "cache_seqlens", at::kInt);
  TORCH_CHECK(cache_seqlens.numel() == B, "cache_seqlens must be [B]");
  attnbook::DeviceGuard guard(q);
  at::Tensor o = q.new_empty({B, H, Sq, D});
  at::Tensor lse = q.new_empty({B, H, Sq}, q.options().dtype(at::kFloat));
  if (o.numel() == 0) return {o, lse.fill_(-INFINITY)};
  at::Tensor o_part, lse_part;
  if (num_splits > 1) {
    o_part = q.new_empty({num_splits, B * H * Sq, D}, q.options().dtype(at::kFloat));
    lse_part = q.new_empty({num_splits, B * H * Sq}, q.options().dtype(at::kFloat));
  }
  TORCH_CHECK(decode_attention(code, q.data_ptr(), lq, k_cache.data_ptr(),
                               v_cache.data_ptr(), cache, cache_seqlens.data_ptr<int>(),
                               int(new_keys), o.data_ptr(),
                               num_splits > 1 ? o_part.data_ptr<float>() : nullptr,
                               lse.data_ptr<float>(),
                               num_splits > 1 ? lse_part.data_ptr<float>() : nullptr,
                               int(B), int(H), int(Hkv), int(Sq), int(D),
                               int(num_splits), float(scale), causal,
                               attnbook::stream()),
              "head_dim ", D, " is not compiled for the decode kernel");
  attnbook::check_launch();
  return {o, lse};
}
