"""The backward pass of chapter 8's tensor-core kernels (``kernels/flash_bwd_tc.cu``)
as the registered op ``torch.ops.attnbook.flash_tc_backward``, and the autograd formula
that makes ``torch.ops.attnbook.flash_tc_forward`` (and so ``ab.attention`` in float16
and bfloat16) differentiable in q, k and v, whichever forward step ran."""
from __future__ import annotations

from typing import Optional

import torch

from .flash import aligned_rows
from .flash_tc import TC_HEAD_DIMS, flash_tc_forward
from .registry import extension

__all__ = ["flash_tc_backward"]


@torch.library.custom_op("attnbook::flash_tc_backward", mutates_args=())
def flash_tc_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                      dlse: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                      key_lengths: Optional[torch.Tensor], mask_options: list[int],
                      scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv (in q's dtype) of the tensor-core forward for the upstream gradients
    ``dout`` (and ``dlse`` of the float32 log-sum-exp, or None), on checked fp16/bf16
    inputs of head_dim 64 or 128. Inputs are made contiguous with rows on 16 bytes."""
    if q.shape[-1] not in TC_HEAD_DIMS:
        raise ValueError(f"head_dim {q.shape[-1]} is not compiled for the tensor-core "
                         f"backward pass: use one of {TC_HEAD_DIMS}")
    module = extension("flash_bwd_tc").module(q.device)
    dout, q, k, v, o = (aligned_rows(t.contiguous()) for t in (dout, q, k, v, o))
    none = lse.new_empty(0)
    return tuple(module.backward(
        dout, q, k, v, o, lse.contiguous(),
        none if dlse is None else dlse.contiguous(),
        none if bias is None else bias, none if key_lengths is None else key_lengths,
        mask_options, scale))


@flash_tc_backward.register_fake
def _(dout, q, k, v, o, lse, dlse, bias, key_lengths, mask_options, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, bias, key_lengths, mask_options, scale, *_ = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, bias, key_lengths)
    ctx.options = (mask_options, scale)


def _backward(ctx, do, dlse):
    q, k, v, o, lse, bias, key_lengths = ctx.saved_tensors
    dq, dk, dv = flash_tc_backward(do, q, k, v, o, lse, dlse, bias, key_lengths,
                                   *ctx.options)
    return dq, dk, dv, *[None] * 7


flash_tc_forward.register_autograd(_backward, setup_context=_setup_context)
