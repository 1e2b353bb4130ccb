"""The fused fp32 attention kernel of ``kernels/flash_fp32.cu`` as the registered op
``torch.ops.attnbook.flash_forward``, and its Python entry point."""
from __future__ import annotations

from typing import Optional

import torch

from ..args.attention import attention_args
from .registry import extension

__all__ = ["flash_attention_fp32", "flash_forward", "check_flash_config",
           "check_no_mask_grad",
           "FLASH_FP32_HEAD_DIMS", "FLASH_FP32_TILES", "FLASH_FP32_SWEEP"]

FLASH_FP32_HEAD_DIMS = (32, 64, 96, 128)
FLASH_FP32_TILES = (64, 32)   # (Br, Bc) compiled for every head dimension
# (Br, Bc) compiled at head_dim 64 for chapter 7's sweep.
FLASH_FP32_SWEEP = tuple((br, bc) for br in (32, 64, 128) for bc in (16, 32, 64))


@torch.library.custom_op("attnbook::flash_forward", mutates_args=())
def flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  bias: Optional[torch.Tensor], key_lengths: Optional[torch.Tensor],
                  causal: bool, stride: int, window: int, scale: float, block_q: int,
                  block_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused forward on checked inputs (see
    :class:`~attnbook.args.attention.AttentionArgs`): o [B, H, Sq, D] and the
    log-sum-exp [B, H, Sq] a backward pass needs."""
    none = q.new_empty(0)
    return tuple(extension("flash_fp32").module(q.device).flash_forward(
        q, k, v, none if bias is None else bias,
        none if key_lengths is None else key_lengths,
        causal, stride, window, scale, block_q, block_k))


@flash_forward.register_fake
def _(q, k, v, bias, key_lengths, causal, stride, window, scale, block_q, block_k):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1])


def check_no_mask_grad(a) -> None:
    """The backward gives gradients for q, k and v only: a float mask that requires grad
    is refused, rather than left silently without one."""
    if a.bias is not None and a.bias.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError("attn_mask requires grad, but the book's backward "
                                  "pass computes gradients for q, k and v only: pass "
                                  "attn_mask.detach()")


def check_flash_config(d: int, tiles=FLASH_FP32_TILES) -> tuple:
    """The (Br, Bc) tiles, if the fused kernel is compiled for head_dim ``d`` with
    them."""
    if d not in FLASH_FP32_HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported by the fused kernel "
                         f"(impl='flash'): use one of {FLASH_FP32_HEAD_DIMS}; "
                         "impl='naive' and impl='tiled' take any head_dim")
    tiles = tuple(tiles)
    if tiles != FLASH_FP32_TILES and not (d == 64 and tiles in FLASH_FP32_SWEEP):
        sweep = f" or one of {FLASH_FP32_SWEEP}" if d == 64 else ""
        raise ValueError(f"tiles {tiles} are not compiled for head_dim {d}: use "
                         f"{FLASH_FP32_TILES}{sweep}")
    return tiles


def flash_attention_fp32(q, k, v, *, causal=False, scale=None, attn_mask=None,
                         stride=None, window=None, key_lengths=None,
                         tiles=FLASH_FP32_TILES, return_lse=False):
    """softmax(q kᵀ · scale + mask) v by the fused fp32 kernel. Inputs as for
    :func:`attnbook.attention` (q [*batch, H, Sq, D], k and v [*batch, Hkv, Sk, D], any
    strides, on a GPU or on the CPU for the emulator; causal aligned bottom-right).
    ``tiles`` = (Br, Bc): (64, 32), or at D = 64 any of ``FLASH_FP32_SWEEP``. Returns o
    (and the log-sum-exp [*batch, H, Sq] if ``return_lse``)."""
    a = attention_args(q, k, v, attn_mask, 0.0, causal, scale, stride=stride,
                       window=window, key_lengths=key_lengths)
    tiles = check_flash_config(a.q.shape[-1], tiles)
    check_no_mask_grad(a)
    o, lse = flash_forward(a.q, a.k, a.v, a.bias, a.key_lengths, a.causal, a.stride,
                           a.window, a.scale, *tiles)
    o = a.output(o)
    return (o, lse.reshape(a.out_shape[:-1])) if return_lse else o
