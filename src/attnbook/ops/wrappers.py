"""C++ shared by the attention wrappers: how checked tensors become the plain structs
the kernels take (``kernels/mask_params.h``, ``kernels/layout.h``)."""

__all__ = ["ATTENTION_CPP", "LAYOUT_CPP"]

# The strides of a checked tensor, as kernels/layout.h's struct.
LAYOUT_CPP = r"""
#include "layout.h"

// The strides of a [B, H, S, D] tensor of `dtype` whose head dimension is contiguous.
static Layout layout_of(const at::Tensor& t, const char* name,
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
"""

ATTENTION_CPP = LAYOUT_CPP + r"""
#include "mask_params.h"

// The sizes of q [B, H, Sq, D] and k, v [B, Hkv, Sk, D], H a multiple of Hkv.
struct AttentionShape {
  int64_t B, H, Hkv, Sq, Sk, D;
};
static AttentionShape attention_shape(const at::Tensor& q, const at::Tensor& k,
                                      const at::Tensor& v) {
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == q.size(0) &&
                  k.size(3) == q.size(3),
              "k and v must be [B, Hkv, Sk, D] with q's B and D");
  const int64_t H = q.size(1), Hkv = k.size(1);
  TORCH_CHECK(Hkv > 0 ? H % Hkv == 0 : H == 0,
              "query heads must be a multiple of key/value heads");
  return {q.size(0), H, Hkv, q.size(2), k.size(2), q.size(3)};
}

// bias: additive mask viewed as [B, H, Sq, Sk] with broadcast strides (numel 0: none);
// lengths: int32 [B] key lengths (numel 0: none). stride and window: 0 (off) or
// positive, already reduced to 32 bits by the Python checks; checked again here.
static MaskParams mask_params(const at::Tensor& bias, const at::Tensor& lengths,
                              bool causal, int64_t stride, int64_t window) {
  TORCH_CHECK(stride >= 0 && stride <= INT32_MAX && window >= 0 && window <= INT32_MAX,
              "stride and window must be in [0, 2^31)");
  MaskParams m;
  m.causal = causal;
  m.stride = int(stride);
  m.window = int(window);
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
"""
