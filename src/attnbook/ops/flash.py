"""The fused fp32 attention kernel of ``kernels/flash_fp32.cu``, callable from Python."""
from __future__ import annotations

import math

from ..reference import masks
from ..toolchain.compile import default_backend, package_module

__all__ = ["flash_attention_fp32", "WRAPPER", "FLASH_FP32_HEAD_DIMS", "FLASH_FP32_TILES", "FLASH_FP32_SWEEP"]

FLASH_FP32_HEAD_DIMS = (32, 64, 96, 128)
FLASH_FP32_TILES = (64, 32)   # (Br, Bc) compiled for every head dimension
# (Br, Bc) compiled at head_dim 64 for chapter 7's sweep.
FLASH_FP32_SWEEP = tuple((br, bc) for br in (32, 64, 128) for bc in (16, 32, 64))

WRAPPER = masks.MASK_PARAMS_CPP + r"""
bool flash_fwd_fp32(const float*, const float*, const float*, float*, float*, int, int, int, int,
                    int, int, int, int, float, const MaskParams&, cudaStream_t);

std::vector<at::Tensor> flash_forward(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor bias,
                                      at::Tensor lengths, bool causal, int64_t stride, int64_t window,
                                      double scale, int64_t block_q, int64_t block_k) {
  attnbook::check_tensor(q, "q", at::kFloat);
  attnbook::check_tensor(k, "k", at::kFloat);
  attnbook::check_tensor(v, "v", at::kFloat);
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be [B, H, S, D]");
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == q.size(0) && k.size(3) == q.size(3),
              "k and v must be [B, Hkv, Sk, D] with q's B and D");
  TORCH_CHECK(q.size(1) % k.size(1) == 0, "query heads must be a multiple of key/value heads");
  const int B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3), Hkv = k.size(1), Sk = k.size(2);
  at::Tensor o = q.new_empty(q.sizes()), lse = q.new_empty({B, H, Sq});
  if (o.numel() == 0) return {o, lse};
  TORCH_CHECK(flash_fwd_fp32(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                             o.data_ptr<float>(), lse.data_ptr<float>(), B, H, Hkv, Sq, Sk, D,
                             int(block_q), int(block_k), float(scale),
                             mask_params(bias, lengths, causal, stride, window), attnbook::stream()),
              "head_dim ", D, " with tiles ", block_q, "x", block_k, " is not compiled");
  attnbook::check_launch();
  return {o, lse};
}
"""


def flash_attention_fp32(q, k, v, *, causal=False, scale=None, attn_mask=None, stride=None, window=None,
                         key_lengths=None, tiles=FLASH_FP32_TILES, return_lse=False, backend=None):
    """softmax(q kᵀ · scale + mask) v by the fused fp32 kernel. q: [B, H, Sq, D]; k, v:
    [B, Hkv, Sk, D] with H a multiple of Hkv; masks as in :func:`attnbook.attention` (causal
    aligned bottom-right). ``tiles`` = (Br, Bc): (64, 32), or at D = 64 any of
    ``FLASH_FP32_SWEEP``. Returns o (and the log-sum-exp [B, H, Sq] if ``return_lse``).
    Inputs live on the GPU, or on the CPU for the emulator."""
    if q.dim() != 4:
        raise ValueError(f"q must be [B, H, Sq, D], got shape {tuple(q.shape)}")
    d = q.shape[-1]
    if d not in FLASH_FP32_HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported by the fused kernel (impl='flash'): use one of "
                         f"{FLASH_FP32_HEAD_DIMS}; impl='naive' and impl='tiled' take any head_dim")
    tiles = tuple(tiles)
    if tiles != FLASH_FP32_TILES and not (d == 64 and tiles in FLASH_FP32_SWEEP):
        raise ValueError(f"tiles {tiles} are not compiled for head_dim {d}: use {FLASH_FP32_TILES}"
                         f"{f' or one of {FLASH_FP32_SWEEP}' if d == 64 else ''}")
    backend = backend or default_backend()
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    bias, lengths = masks.kernel_tensors(q, k, attn_mask, key_lengths)
    module = package_module("flash_fp32", "flash_fp32.cu", WRAPPER, ["flash_forward"], backend)
    o, lse = module.flash_forward(q, k, v, bias, lengths, bool(causal), stride or 0, window or 0, scale, *tiles)
    return (o, lse) if return_lse else o
