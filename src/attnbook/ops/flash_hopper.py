"""Chapter 12's Hopper kernels (``kernels/flash_hopper.cu`` and its
``flash_hopper_*.cuh`` steps) as the registered op
``torch.ops.attnbook.flash_hopper_forward``, and their Python entry point for float16
and bfloat16 inputs: sm_90a code, run by an H100 or H200, or by the emulator."""
from __future__ import annotations

from typing import Optional

import torch

from ..args.attention import HALF_PRECISION, attention_args
from .flash import aligned_rows, check_no_mask_grad
from .registry import extension

__all__ = ["flash_attention_hopper", "flash_hopper_forward", "HOPPER_STEPS"]

# The chapter's steps, each a kernel of kernels/flash_hopper*.
HOPPER_STEPS = {1: "wgmma from shared memory", 2: "TMA loads on mbarriers",
                3: "a producer warpgroup and two consumers",
                4: "the consumers' matrix products in turns (ping-pong)",
                5: "each consumer's tiles pipelined (softmax beside P V)"}
HOPPER_HEAD_DIMS = (64, 128)


@torch.library.custom_op("attnbook::flash_hopper_forward", mutates_args=())
def flash_hopper_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         bias: Optional[torch.Tensor],
                         key_lengths: Optional[torch.Tensor], mask_options: list[int],
                         scale: float, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step`` of chapter 12 on checked fp16/bf16 inputs (head_dim 64 or 128): o
    [B, H, Sq, D] in q's dtype and the float32 log-sum-exp [B, H, Sq]. Inputs whose rows
    do not start on 16 bytes are copied first, and for TMA (step 2 on) those with a
    stride of 0 (a broadcast view)."""
    if q.device.type == "cuda" and torch.cuda.get_device_capability(q.device) != (9, 0):
        raise RuntimeError(f"chapter 12's kernels are sm_90a code: they need an H100 "
                           f"or H200, not {torch.cuda.get_device_name(q.device)}")
    module = extension("flash_hopper").module(q.device)
    none = q.new_empty(0, dtype=torch.float32)
    ready = aligned_rows if step == 1 else _tma_rows
    return tuple(module.forward(
        ready(q), ready(k), ready(v),
        none if bias is None else bias,
        none if key_lengths is None else key_lengths, mask_options, scale, step))


def _tma_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a TMA tensor map describes it: rows on 16 bytes and no index of more
    than one value at stride 0 (the driver wants non-zero multiples of 16 bytes)."""
    t = aligned_rows(t)
    if any(n > 1 and s == 0 for n, s in zip(t.shape[:3], t.stride()[:3])):
        return t.contiguous()
    return t


@flash_hopper_forward.register_fake
def _(q, k, v, bias, key_lengths, mask_options, scale, step):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)


def flash_attention_hopper(q, k, v, attn_mask=None, is_causal=False, scale=None, *,
                           key_lengths=None, step=1, return_lse=False, **mask):
    """softmax(q kᵀ · scale + mask) v by step ``step`` of chapter 12
    (:data:`HOPPER_STEPS`), for float16 and bfloat16 inputs of head_dim 64 or 128, on
    an H100/H200 or the emulator. Arguments as for :func:`attnbook.attention`. Returns o
    in q's dtype (and the float32 log-sum-exp if ``return_lse``); forward only."""
    a = attention_args(q, k, v, attn_mask, 0.0, is_causal, scale,
                       key_lengths=key_lengths, dtypes=HALF_PRECISION, **mask)
    if step not in HOPPER_STEPS:
        raise ValueError(f"step must be one of {tuple(HOPPER_STEPS)}, got {step!r}")
    d = a.q.shape[-1]
    if d not in HOPPER_HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not compiled for chapter 12's kernels: use "
                         f"one of {HOPPER_HEAD_DIMS}")
    check_no_mask_grad(a)
    if any(t.requires_grad for t in (a.q, a.k, a.v)) and torch.is_grad_enabled():
        raise NotImplementedError("chapter 12's kernels are forward only: use "
                                  "ab.flash_attention_tc for gradients")
    o, lse = flash_hopper_forward(a.q, a.k, a.v, a.bias, a.key_lengths, a.mask_options,
                                  a.scale, step)
    o = a.output(o)
    return (o, lse.reshape(a.out_shape[:-1])) if return_lse else o
