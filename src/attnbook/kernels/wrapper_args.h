// How the wrappers turn checked tensors into the plain structs the kernels take
// (layout.h, mask_params.h, kv_cache.h). Host code for the *_wrapper.cpp files,
// compiled against torch without CUDA.
#pragma once
#include <cstdint>

#include "attnbook_torch.h"
#include "kv_cache.h"
#include "layout.h"
#include "mask_params.h"

// The strides of a [B, H, S, D] tensor of `dtype` whose head dimension is contiguous.
inline Layout layout_of(const at::Tensor& t, const char* name,
                        at::ScalarType dtype = at::kFloat) {
  attnbook::check_tensor(t, name, dtype, /*contiguous=*/false);
  TORCH_CHECK(t.dim() == 4, name, " must be [B, H, S, D]");
  TORCH_CHECK(t.stride(3) == 1 || t.size(3) <= 1, name,
              "'s head dimension must be contiguous");
  Layout l;
  l.b = t.stride(0);
  l.h = t.stride(1);
  l.s = t.stride(2);
  return l;
}

// Rows that start on 16 bytes, what 16-byte loads need: t's data and its batch, head
// and sequence strides.
inline void check_aligned(const at::Tensor& t, const char* name) {
  const int64_t per_16_bytes = 16 / t.element_size();
  bool ok = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  for (int d = 0; d < 3; ++d)
    ok = ok && (t.size(d) <= 1 || t.stride(d) % per_16_bytes == 0);
  TORCH_CHECK(ok, name, " must start on 16 bytes with batch, head and sequence ",
              "strides that are multiples of ", per_16_bytes, " elements");
}

// The sizes of q [B, H, Sq, D] and k, v [B, Hkv, Sk, D], H a multiple of Hkv.
struct AttentionShape {
  int64_t B, H, Hkv, Sq, Sk, D;
};
inline AttentionShape attention_shape(const at::Tensor& q, const at::Tensor& k,
                                      const at::Tensor& v) {
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == q.size(0) &&
                  k.size(3) == q.size(3),
              "k and v must be [B, Hkv, Sk, D] with q's B and D");
  const int64_t H = q.size(1), Hkv = k.size(1);
  TORCH_CHECK(Hkv > 0 ? H % Hkv == 0 : H == 0,
              "query heads must be a multiple of key/value heads");
  return {q.size(0), H, Hkv, q.size(2), k.size(2), q.size(3)};
}

// What a backward pass takes besides q, k, v: o and dout of q's shape, the float
// log-sum-exp lse [B, H, Sq] and its gradient dlse (empty: none). Returns whether dlse
// is given.
inline bool check_backward_args(const at::Tensor& q, const at::Tensor& o,
                                const at::Tensor& dout, const at::Tensor& lse,
                                const at::Tensor& dlse) {
  attnbook::check_tensor(lse, "lse", at::kFloat);
  TORCH_CHECK(o.sizes() == q.sizes() && dout.sizes() == q.sizes(),
              "o and dout must have q's shape");
  TORCH_CHECK(lse.sizes() == q.sizes().slice(0, 3), "lse must be [B, H, Sq]");
  if (dlse.numel() == 0) return false;
  attnbook::check_tensor(dlse, "dlse", at::kFloat);
  TORCH_CHECK(dlse.sizes() == lse.sizes(), "dlse must have lse's shape");
  return true;
}

// bias: additive mask viewed as [B, H, Sq, Sk] with broadcast strides (numel 0: none);
// lengths: int32 [B] key lengths (numel 0: none); options: the scalar options'
// values, one per line of MASK_OPTIONS (mask_params.h) in its order
// (AttentionArgs.mask_options), already reduced to 32 bits by the Python checks and
// checked again here.
inline MaskParams mask_params(const at::Tensor& bias, const at::Tensor& lengths,
                              const std::vector<int64_t>& options) {
  MaskParams m;
  size_t next = 0;
#define MASK_READ(type, name)                                                         \
  TORCH_CHECK(next < options.size(), "mask options: no value for " #name);           \
  TORCH_CHECK(options[next] >= 0 && options[next] <= INT32_MAX,                     \
              "mask option " #name " must be in [0, 2^31), got ", options[next]);    \
  m.name = type(options[next++]);
  MASK_OPTIONS(MASK_READ)
#undef MASK_READ
  TORCH_CHECK(next == options.size(), "mask options: ", options.size(),
              " values for ", next, " options");
  if (bias.numel() > 0) {
    attnbook::check_tensor(bias, "bias", at::kFloat, /*contiguous=*/false);
    TORCH_CHECK(bias.dim() == 4, "bias must be a float [B, H, Sq, Sk] view");
    m.bias = bias.data_ptr<float>();
    m.bs0 = bias.stride(0);
    m.bs1 = bias.stride(1);
    m.bs2 = bias.stride(2);
    m.bs3 = bias.stride(3);
  }
  if (lengths.numel() > 0) {
    attnbook::check_tensor(lengths, "key_lengths", at::kInt);
    m.key_lengths = lengths.data_ptr<int>();
  }
  return m;
}

// A contiguous cache [B, Hkv, max_len, D] (block_table.dim() != 2), or a pool of pages
// [num_blocks, Hkv, block_size, D] with an int32 block table [B, max_blocks].
inline KVCache kv_cache_of(const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& block_table, int64_t B) {
  KVCache c;
  c.k = layout_of(k_cache, "k_cache", k_cache.scalar_type());
  c.v = layout_of(v_cache, "v_cache", k_cache.scalar_type());
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes(),
              "k_cache and v_cache must have one shape");
  const int64_t pages = k_cache.size(0), block = k_cache.size(2);
  int64_t capacity = block;
  if (block_table.dim() == 2) {
    attnbook::check_tensor(block_table, "block_table", at::kInt);
    TORCH_CHECK(block_table.size(0) == B, "block_table must be [B, max_blocks]");
    TORCH_CHECK(block > 0, "pages must hold at least one position");
    c.block_table = block_table.data_ptr<int>();
    c.table_stride = block_table.stride(0);
    capacity = block_table.size(1) * block;
  } else {
    TORCH_CHECK(pages == B, "a contiguous cache must be [B, Hkv, max_len, D]");
  }
  TORCH_CHECK(pages <= INT32_MAX && capacity <= INT32_MAX - 64,
              "the cache is too large for 32-bit positions");
  c.block_size = int(block);
  c.num_pages = int(pages);
  c.capacity = int(capacity);
  return c;
}

// What a half-precision forward's wrapper hands its launcher (chapters 8 and 12): q,
// k, v checked (fp16 or bf16; unless o is empty, rows on 16 bytes), their layouts and
// sizes, the mask, and new o [B, H, Sq, D] of q's dtype and lse float [B, H, Sq].
struct HalfForward {
  bool bf16;
  Layout lq, lk, lv;
  AttentionShape n;
  MaskParams mask;
  at::Tensor o, lse;
};
inline HalfForward half_forward(const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v, const at::Tensor& bias,
                                const at::Tensor& lengths,
                                const std::vector<int64_t>& mask_options) {
  HalfForward f;
  f.bf16 = q.scalar_type() == at::kBFloat16;
  const auto dtype = f.bf16 ? at::kBFloat16 : at::kHalf;
  f.lq = layout_of(q, "q", dtype);
  f.lk = layout_of(k, "k", dtype);
  f.lv = layout_of(v, "v", dtype);
  f.n = attention_shape(q, k, v);
  TORCH_CHECK(f.n.B * f.n.H <= INT32_MAX && f.n.Sq <= INT32_MAX - 256 &&
                  f.n.Sk <= INT32_MAX - 256,
              "B·H, Sq and Sk must be below 2^31 - 256");
  f.mask = mask_params(bias, lengths, mask_options);
  f.o = q.new_empty({f.n.B, f.n.H, f.n.Sq, f.n.D});
  f.lse = q.new_empty({f.n.B, f.n.H, f.n.Sq}, q.options().dtype(at::kFloat));
  if (f.o.numel() > 0) {
    check_aligned(q, "q");
    check_aligned(k, "k");
    check_aligned(v, "v");
  }
  return f;
}
