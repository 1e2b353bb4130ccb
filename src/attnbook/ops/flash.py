"""The fused fp32 attention kernel of ``kernels/flash_fp32.cu`` as the registered op
``torch.ops.attnbook.flash_forward``, and its Python entry point."""
from __future__ import annotations

from typing import Optional

import torch

from ..args.attention import attention_args, takes_is_causal
from .registry import extension

__all__ = ["flash_attention_fp32", "flash_forward", "check_flash_config",
           "check_no_mask_grad", "aligned_rows", "FLASH_FP32_STEPS",
           "FLASH_FP32_FASTEST", "FLASH_FP32_HEAD_DIMS", "FLASH_FP32_TILES",
           "FLASH_FP32_SWEEP"]

# The chapter's steps, each a kernel of kernels/flash_fp32*.
FLASH_FP32_STEPS = {1: "a thread per query row", 2: "register tiles",
                    3: "register tiles sized for occupancy"}
# The step ab.attention runs in float32: on the H200 (B=4, H=8, D=64, S = 512 … 4096,
# causal and not; bench/results/07) step 3 took 6% less time than step 2 in all, 7-10%
# less from S = 1024 without a mask, and at most 4% more at any shape.
FLASH_FP32_FASTEST = 3
FLASH_FP32_HEAD_DIMS = (32, 64, 96, 128)
# (Br, Bc) of each step, every head dim
FLASH_FP32_TILES = {1: (64, 32), 2: (64, 64), 3: (64, 64)}
# (Br, Bc) compiled for step 1 at head_dim 64, for chapter 7's sweep.
FLASH_FP32_SWEEP = tuple((br, bc) for br in (32, 64, 128) for bc in (16, 32, 64))


def aligned_rows(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a contiguous copy if its rows do not start on 16 bytes (what the
    kernels' 16-byte loads need)."""
    per_16_bytes = 16 // t.element_size()
    ok = t.data_ptr() % 16 == 0 and all(
        n <= 1 or s % per_16_bytes == 0 for n, s in zip(t.shape[:3], t.stride()[:3]))
    return t if ok else torch.empty_like(
        t, memory_format=torch.contiguous_format).copy_(t)


@torch.library.custom_op("attnbook::flash_forward", mutates_args=())
def flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  bias: Optional[torch.Tensor], key_lengths: Optional[torch.Tensor],
                  mask_options: list[int], scale: float, step: int, block_q: int,
                  block_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step`` of the fused forward on checked inputs (see
    :class:`~attnbook.args.attention.AttentionArgs`): o [B, H, Sq, D] and the
    log-sum-exp [B, H, Sq] a backward pass needs. Steps 2 and 3 copy inputs whose rows
    do not start on 16 bytes."""
    none = q.new_empty(0)
    if step >= 2:
        q, k, v = aligned_rows(q), aligned_rows(k), aligned_rows(v)
    return tuple(extension("flash_fp32").module(q.device).flash_forward(
        q, k, v, none if bias is None else bias,
        none if key_lengths is None else key_lengths,
        mask_options, scale, step, block_q, block_k))


@flash_forward.register_fake
def _(q, k, v, bias, key_lengths, mask_options, scale, step, block_q, block_k):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1])


def check_no_mask_grad(a) -> None:
    """The backward gives gradients for q, k and v only: a float mask that requires grad
    is refused, rather than left silently without one."""
    if a.bias is not None and a.bias.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError("attn_mask requires grad, but the book's backward "
                                  "pass computes gradients for q, k and v only: pass "
                                  "attn_mask.detach()")


def check_flash_config(d: int, tiles=None, step: int = FLASH_FP32_FASTEST) -> tuple:
    """The (Br, Bc) tiles of ``step`` (``tiles``, or the step's own if None), if the
    fused kernel is compiled for head_dim ``d`` with them."""
    if step not in FLASH_FP32_STEPS:
        raise ValueError(f"step must be one of {tuple(FLASH_FP32_STEPS)}, got {step!r}")
    if d not in FLASH_FP32_HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported by the fused kernel "
                         f"(impl='flash'):\nuse one of {FLASH_FP32_HEAD_DIMS}; "
                         "impl='naive' and impl='tiled' take any head_dim")
    own = FLASH_FP32_TILES[step]
    tiles = own if tiles is None else tuple(tiles)
    sweep = step == 1 and d == 64
    if tiles != own and not (sweep and tiles in FLASH_FP32_SWEEP):
        more = f" or one of {FLASH_FP32_SWEEP}" if sweep else ""
        raise ValueError(f"tiles {tiles} are not compiled for step {step} at head_dim "
                         f"{d}: use {own}{more}")
    return tiles


@takes_is_causal
def flash_attention_fp32(q, k, v, *, is_causal=False, scale=None, attn_mask=None,
                         key_lengths=None, step=FLASH_FP32_FASTEST, tiles=None,
                         return_lse=False, **mask):
    """softmax(q kᵀ · scale + mask) v by the fused fp32 kernel. Inputs as for
    :func:`attnbook.attention` (q [*batch, H, Sq, D], k and v [*batch, Hkv, Sk, D], any
    strides, on a GPU or on the CPU for the emulator; causal aligned bottom-right).
    ``step``: 1 (a thread per query row), 2 (register tiles) or 3 (register tiles
    sized for occupancy), ``FLASH_FP32_FASTEST`` by default;
    ``tiles`` = (Br, Bc): the step's own (``FLASH_FP32_TILES``), or for step 1 at
    D = 64 any of ``FLASH_FP32_SWEEP``. Returns o (and the log-sum-exp
    [*batch, H, Sq] if ``return_lse``)."""
    a = attention_args(q, k, v, attn_mask, 0.0, is_causal, scale,
                       key_lengths=key_lengths, **mask)
    tiles = check_flash_config(a.q.shape[-1], tiles, step)
    check_no_mask_grad(a)
    o, lse = flash_forward(a.q, a.k, a.v, a.bias, a.key_lengths, a.mask_options,
                           a.scale, step, *tiles)
    o = a.output(o)
    return (o, lse.reshape(a.out_shape[:-1])) if return_lse else o
