"""``attnbook.attention``: the book's kernels behind the contract of
``torch.nn.functional.scaled_dot_product_attention``.

Every input is checked (:mod:`attnbook.args`) before anything is launched. Tensors on
a CUDA device run the CUDA kernels on that device; tensors on the CPU run the same
kernels on the emulator. The kernels are registered ops (``torch.ops.attnbook.*``) with
fake implementations, so ``torch.compile(ab.attention, fullgraph=True)``, meta
tensors, ``torch.jit.trace`` and ``torch.export`` see one opaque op per call.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..args.attention import (HALF_PRECISION, INT32_MAX, attention_args,
                              check_mask_keywords)
from .flash import (FLASH_FP32_FASTEST, check_flash_config, check_no_mask_grad,
                    flash_forward)
from .flash_tc import tc_forward
from .registry import extension

__all__ = ["attention", "Attention", "IMPLS", "three_kernels", "three_kernel_forward"]

IMPLS = ("flash", "tiled", "naive")


@torch.library.custom_op("attnbook::three_kernel_forward", mutates_args=())
def three_kernel_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         bias: Optional[torch.Tensor],
                         key_lengths: Optional[torch.Tensor],
                         mask_options: list[int], scale: float, impl: str,
                         key_step: int) -> torch.Tensor:
    """The naive or tiled path on checked inputs: scores, softmax and P·V as three
    kernels, the scores in a [B, H, Sq, ceil(Sk / key_step)] workspace. Returns o
    [B, H, Sq, D]."""
    module = extension(f"{impl}_attention").module(q.device)
    none = q.new_empty(0)
    return module.forward(q, k, v, none if bias is None else bias,
                          none if key_lengths is None else key_lengths, mask_options,
                          scale, key_step)


@three_kernel_forward.register_fake
def _(q, k, v, bias, key_lengths, mask_options, scale, impl, key_step):
    return q.new_empty(q.shape)


def _three_kernel_path(a, impl, gather=True):
    b, h, sq, d = a.q.shape
    if b * h * sq > INT32_MAX or a.k.shape[2] * d > INT32_MAX:
        raise ValueError(f"impl={impl!r} keeps B·H·Sq = {b * h * sq} and Sk·D = "
                         f"{a.k.shape[2] * d} below 2^31; "
                         "impl='flash' has no such limit")
    qkv = (a.q, a.k, a.v)
    # the GEMMs take one distance between batches: contiguous operands
    if impl == "tiled":
        qkv = tuple(t.contiguous() for t in qkv)
    stride = a.mask["stride"]
    key_step = stride if impl == "tiled" and stride and gather else 1
    o = three_kernel_forward(*qkv, a.bias, a.key_lengths, a.mask_options, a.scale,
                             impl, key_step)
    return a.output(o)


def three_kernels(q, k, v, attn_mask=None, is_causal=False, scale=None, *,
                  key_lengths=None, impl="tiled", gather=True, **mask):
    """The naive or tiled path of :func:`attention`. The tiled path computes strided
    attention on the attended keys only (``gather``); ``gather=False`` computes every
    score and masks, for comparison (chapter 5)."""
    if impl not in ("naive", "tiled"):
        raise ValueError(f"impl must be 'naive' or 'tiled', got {impl!r}")
    a = attention_args(q, k, v, attn_mask, 0.0, is_causal, scale,
                       key_lengths=key_lengths, **mask)
    return _three_kernel_path(a, impl, gather)


def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, *, key_lengths=None, impl="flash", **mask):
    """softmax(q kᵀ · scale + mask) v by the book's kernels, with the signature and the
    values of ``torch.nn.functional.scaled_dot_product_attention``.

    q: [*batch, H, Sq, D]; k, v: [*batch, Hkv, Sk, D] with H a multiple of Hkv, and
    H ≠ Hkv (grouped-query attention) with ``enable_gqa=True``, as SDPA; any strides;
    float32,
    or float16 and bfloat16 (impl="flash" only: chapter 8's tensor cores,
    head_dim ≤ 128); on a CUDA device, or on the CPU where the emulator runs the
    kernels.
    ``attn_mask``: bool (True = attend) or additive float, broadcast to
    [*batch, H, Sq, Sk]. ``dropout_p`` must be 0. The book's masks: ``key_lengths``
    ([B] integers: keys j < L[b]; clamped to [0, Sk]) and, by keyword (``mask``, as
    :mod:`attnbook.masks` defines them), ``stride`` (keys j % stride == 0) and
    ``window`` (|i + Sk − Sq − j| < window); ``impl``: "flash" (chapter 7), "tiled"
    (chapters 4–5) or "naive" (chapter 2).

    Differences from SDPA, on purpose: ``is_causal`` aligns bottom-right when Sq ≠ Sk; a
    row with no admissible key gives zeros; a masked key is absent — NaN or inf in its k
    (every path) or its v (impl="flash" in float32) does not reach the output, where
    SDPA's math path turns it into NaN through 0·NaN. NaN and ±inf anywhere else
    propagate as in SDPA.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa must be a bool, got {enable_gqa!r}")
    a = attention_args(q, k, v, attn_mask, dropout_p, is_causal, scale,
                       key_lengths=key_lengths, enable_gqa=enable_gqa,
                       dtypes=(torch.float32, *HALF_PRECISION), **mask)
    if a.q.dtype in HALF_PRECISION:
        if impl != "flash":
            raise NotImplementedError(
                f"impl={impl!r} computes in float32; float16 and bfloat16 run on "
                "impl='flash' (chapter 8's tensor-core kernel)")
        return a.output(tc_forward(a)[0])
    if impl != "flash":
        return _three_kernel_path(a, impl)
    if a.q.numel() == 0:
        return q.new_zeros(a.out_shape)
    tiles = check_flash_config(a.q.shape[-1])
    check_no_mask_grad(a)
    o, _ = flash_forward(a.q, a.k, a.v, a.bias, a.key_lengths, a.mask_options,
                         a.scale, FLASH_FP32_FASTEST, *tiles)
    return a.output(o)


class Attention(torch.nn.Module):
    """Multi-head attention over [*batch, H, S, D] tensors with a fixed implementation
    and mask (``mask``: the book's masks by keyword, as :func:`attention` takes
    them)."""

    def __init__(self, impl="flash", is_causal=False, scale=None, enable_gqa=False,
                 **mask):
        super().__init__()
        check_mask_keywords(mask)
        self.impl, self.is_causal, self.scale = impl, is_causal, scale
        self.enable_gqa, self.mask = enable_gqa, mask

    def forward(self, q, k, v, attn_mask=None, key_lengths=None):
        return attention(q, k, v, attn_mask, 0.0, self.is_causal, self.scale,
                         self.enable_gqa, key_lengths=key_lengths, impl=self.impl,
                         **self.mask)
