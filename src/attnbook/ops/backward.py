"""The backward pass of the fused fp32 kernel (``kernels/flash_bwd_fp32.cu``, two steps)
as the registered op ``torch.ops.attnbook.flash_backward``, and the autograd formula
that makes ``torch.ops.attnbook.flash_forward`` (and so ``ab.attention`` in float32)
differentiable in q, k and v: forward steps 1 and 2 by the backward step of their
number, step 3 (``ab.attention``'s) by :func:`fastest_backward_step`."""
from __future__ import annotations

from typing import Optional

import torch

from .flash import aligned_rows, flash_forward
from .registry import extension

__all__ = ["flash_backward", "FLASH_BWD_FP32_STEPS", "fastest_backward_step"]

FLASH_BWD_FP32_STEPS = {1: "a thread per row or key", 2: "eight lanes per row or key"}


def fastest_backward_step(head_dim: int) -> int:
    """The backward step ``ab.attention`` runs in float32: step 1 up to d = 64, where
    the H200 measured it 1.1-1.7 times faster than step 2 from S = 1024 (chapter 11's
    benchmark; step 2's loops issue 5-7 other instructions per FFMA); step 2 above,
    where nothing is measured yet and step 1 spills inside its loops."""
    return 1 if head_dim <= 64 else 2


@torch.library.custom_op("attnbook::flash_backward", mutates_args=())
def flash_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                   v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                   dlse: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                   key_lengths: Optional[torch.Tensor],
                   mask_options: list[int], scale: float, step: int = 2
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of the fused forward for the upstream gradients ``dout`` (and ``dlse``
    of the log-sum-exp, or None), on contiguous checked inputs, by step ``step`` of the
    backward (:data:`FLASH_BWD_FP32_STEPS`)."""
    module = extension("flash_bwd_fp32").module(q.device)
    if step == 2:   # its 16-byte loads and stores need rows that start on 16 bytes
        dout, q, k, v = (aligned_rows(t) for t in (dout, q, k, v))
    none = q.new_empty(0)
    return tuple(module.backward(
        dout, q, k, v, o, lse, none if dlse is None else dlse,
        none if bias is None else bias, none if key_lengths is None else key_lengths,
        mask_options, scale, step))


@flash_backward.register_fake
def _(dout, q, k, v, o, lse, dlse, bias, key_lengths, mask_options, scale, step=2):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, bias, key_lengths, mask_options, scale, step, *_ = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, bias, key_lengths)
    # step 3, ab.attention's forward, takes the fastest backward
    ctx.options = (mask_options, scale,
                   step if step < 3 else fastest_backward_step(q.shape[-1]))


def _backward(ctx, do, dlse):
    q, k, v, o, lse, bias, key_lengths = ctx.saved_tensors
    dq, dk, dv = flash_backward(do.contiguous(), q.contiguous(), k.contiguous(),
                                v.contiguous(), o, lse,
                                None if dlse is None else dlse.contiguous(), bias,
                                key_lengths, *ctx.options)
    return dq, dk, dv, *[None] * 7


flash_forward.register_autograd(_backward, setup_context=_setup_context)
