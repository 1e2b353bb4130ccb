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

__all__ = ["flash_tc_backward", "FLASH_BWD_TC_STEPS", "tc_backward_step"]

FLASH_BWD_TC_STEPS = {1: "two passes: dK and dV, then dQ (7 products)",
                      2: "one pass, FlashAttention-2's shape, dQ in fp32 slots "
                         "(5 products)"}


def tc_backward_step(device: torch.device) -> int:
    """The step ``ab.attention``'s fp16/bf16 backward runs on ``device``: step 2, whose
    tiles need the shared memory of sm_80 and later; step 1 on sm_75 (a T4)."""
    if device.type != "cuda":
        return 2
    return 2 if torch.cuda.get_device_capability(device) >= (8, 0) else 1


@torch.library.custom_op("attnbook::flash_tc_backward", mutates_args=())
def flash_tc_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                      dlse: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                      key_lengths: Optional[torch.Tensor], mask_options: list[int],
                      scale: float, step: int = 0, slots: int = 0
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv (in q's dtype) of the tensor-core forward for the upstream gradients
    ``dout`` (and ``dlse`` of the float32 log-sum-exp, or None), on checked fp16/bf16
    inputs of head_dim 64 or 128, by step ``step`` (:data:`FLASH_BWD_TC_STEPS`; 0:
    :func:`tc_backward_step`'s); step 2 sums dQ in ``slots`` fp32 copies (0: enough to
    fill the GPU). Inputs are made contiguous with rows on 16 bytes."""
    if q.shape[-1] not in TC_HEAD_DIMS:
        raise ValueError(f"head_dim {q.shape[-1]} is not compiled for the tensor-core "
                         f"backward pass: use one of {TC_HEAD_DIMS}")
    module = extension("flash_bwd_tc").module(q.device)
    step = step or tc_backward_step(q.device)
    dout, q, k, v, o = (aligned_rows(t.contiguous()) for t in (dout, q, k, v, o))
    none = lse.new_empty(0)
    return tuple(module.backward(
        dout, q, k, v, o, lse.contiguous(),
        none if dlse is None else dlse.contiguous(),
        none if bias is None else bias, none if key_lengths is None else key_lengths,
        mask_options, scale, step, slots))


@flash_tc_backward.register_fake
def _(dout, q, k, v, o, lse, dlse, bias, key_lengths, mask_options, scale, step=0,
      slots=0):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, bias, key_lengths, mask_options, scale, *_, backward_step = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, bias, key_lengths)
    ctx.options = (mask_options, scale, backward_step)


def _backward(ctx, do, dlse):
    q, k, v, o, lse, bias, key_lengths = ctx.saved_tensors
    dq, dk, dv = flash_tc_backward(do, q, k, v, o, lse, dlse, bias, key_lengths,
                                   *ctx.options)
    return dq, dk, dv, *[None] * 8


flash_tc_forward.register_autograd(_backward, setup_context=_setup_context)
