"""``attnbook.attention``: the book's kernels behind the signature of
``torch.nn.functional.scaled_dot_product_attention``.

Every input is checked before anything is launched. Tensors on a CUDA device run the CUDA
kernels; tensors on the CPU run the same kernels on the emulator.
"""
from __future__ import annotations

import math

import torch

from ..reference import masks
from ..toolchain.compile import package_module
from .flash import flash_attention_fp32

__all__ = ["attention", "Attention", "IMPLS"]

IMPLS = ("flash", "tiled", "naive")

# The three-kernel paths share a signature: the launcher gets a workspace for the scores.
_SCORES_WRAPPER = masks.MASK_PARAMS_CPP + r"""
void LAUNCHER(const float*, const float*, const float*, float*, float*, int, int, int, int, int, int,
              float, MaskParams, int, cudaStream_t);

at::Tensor forward(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor bias, at::Tensor lengths,
                   bool causal, int64_t stride, int64_t window, double scale, int64_t key_step) {
  attnbook::check_tensor(q, "q", at::kFloat);
  attnbook::check_tensor(k, "k", at::kFloat);
  attnbook::check_tensor(v, "v", at::kFloat);
  const int B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3), Hkv = k.size(1), Sk = k.size(2);
  TORCH_CHECK(key_step >= 1, "key_step must be positive");
  at::Tensor o = q.new_empty(q.sizes());
  if (o.numel() == 0) return o;
  at::Tensor s = q.new_empty({B, H, Sq, (Sk + key_step - 1) / key_step});
  LAUNCHER(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), s.data_ptr<float>(),
           o.data_ptr<float>(), B, H, Hkv, Sq, Sk, D, float(scale),
           mask_params(bias, lengths, causal, stride, window), int(key_step), attnbook::stream());
  attnbook::check_launch();
  return o;
}
"""


def _check(q, k, v, attn_mask, key_lengths, stride, window):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, S, D], got shape {tuple(t.shape)}")
        if t.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"q, k, v must be on one device: {name} is on {t.device}, q on {q.device}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (call .contiguous() first)")
    if q.device.type not in ("cuda", "cpu"):
        raise ValueError(f"tensors must be on a CUDA device (or the CPU for the emulator), got {q.device}")
    b, h, _, d = q.shape
    if k.shape != v.shape or k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"k and v must both be [B, Hkv, Sk, D] with q's B={b} and D={d}; "
                         f"got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if h % k.shape[1]:
        raise ValueError(f"query heads ({h}) must be a multiple of key/value heads ({k.shape[1]})")
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError("attn_mask must be a tensor")
        masks.check_attn_mask(attn_mask, b, h, q.shape[2], k.shape[2])
        if attn_mask.device != q.device:
            raise ValueError(f"attn_mask is on {attn_mask.device}, q on {q.device}")
    if key_lengths is not None:
        if not isinstance(key_lengths, torch.Tensor) or key_lengths.shape != (b,) or key_lengths.is_floating_point():
            raise ValueError(f"key_lengths must be an integer tensor of shape [B] = [{b}]")
        if key_lengths.device != q.device:
            raise ValueError(f"key_lengths is on {key_lengths.device}, q on {q.device}")
    for name, val in (("stride", stride), ("window", window)):
        if val is not None and (not isinstance(val, int) or isinstance(val, bool) or val < 1):
            raise ValueError(f"{name} must be a positive int, got {val!r}")


def attention(q, k, v, attn_mask=None, is_causal=False, scale=None, *, stride=None, window=None,
              key_lengths=None, impl="flash"):
    """softmax(q kᵀ · scale + mask) v by the book's kernels.

    q: [B, H, Sq, D], k and v: [B, Hkv, Sk, D] (H a multiple of Hkv), float32, contiguous, on a
    CUDA device (or the CPU, run by the emulator). ``attn_mask`` (bool, True = attend, or
    additive float) broadcasts over [B, H, Sq, Sk]; ``is_causal`` aligns bottom-right when
    Sq != Sk (unlike SDPA's top-left); ``stride``, ``window``, ``key_lengths``: see
    :mod:`attnbook.masks`. A query with no admissible key returns zeros.
    """
    _check(q, k, v, attn_mask, key_lengths, stride, window)
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    d = q.shape[3]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    backend = "cuda" if q.device.type == "cuda" else "emulator"
    if impl == "flash":
        return flash_attention_fp32(q, k, v, causal=is_causal, scale=scale, attn_mask=attn_mask, stride=stride,
                                    window=window, key_lengths=key_lengths, backend=backend)
    return _three_kernels(impl, q, k, v, attn_mask, is_causal, scale, stride, window, key_lengths, backend)


def _three_kernels(impl, q, k, v, attn_mask, is_causal, scale, stride, window, key_lengths, backend,
                   gather=True):
    """The naive or tiled path. The tiled path computes strided attention on the attended keys
    only (``gather``); ``gather=False`` computes every score and masks, for comparison."""
    bias, lengths = masks.kernel_tensors(q, k, attn_mask, key_lengths)
    key_step = stride if impl == "tiled" and stride and gather else 1
    launcher = f"attention_{impl}"
    module = package_module(f"{impl}_attention", f"{impl}_attention.cu",
                            _SCORES_WRAPPER.replace("LAUNCHER", launcher), ["forward"], backend)
    return module.forward(q, k, v, bias, lengths, bool(is_causal), stride or 0, window or 0, scale, key_step)


class Attention(torch.nn.Module):
    """Multi-head attention over [B, H, S, D] tensors with a fixed implementation and mask."""

    def __init__(self, impl="flash", is_causal=False, scale=None, stride=None, window=None):
        super().__init__()
        self.impl, self.is_causal, self.scale, self.stride, self.window = impl, is_causal, scale, stride, window

    def forward(self, q, k, v, attn_mask=None, key_lengths=None):
        return attention(q, k, v, attn_mask, self.is_causal, self.scale, stride=self.stride,
                         window=self.window, key_lengths=key_lengths, impl=self.impl)
