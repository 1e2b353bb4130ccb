"""Exact attention in PyTorch: the yardstick every kernel of the book is checked
against.

Shapes: ``q`` is ``[B, H, Sq, D]``; ``k`` and ``v`` are ``[B, Hkv, Sk, D]`` with ``H`` a
multiple of ``Hkv`` (grouped-query attention: query head ``h`` reads key/value head
``h // (H // Hkv)``; ``Hkv == 1`` is multi-query attention).

A query row that may attend no key at all returns zeros, not NaN, and its
log-sum-exp is ``-inf``.  (The softmax of an all ``-inf`` row is 0/0; we define the
empty sum's weighted average as 0, as FlashAttention does.)
A key that a mask excludes takes no part, whatever its ``k`` holds: a NaN or an inf
in it (or in ``q``, which makes ``q·k`` infinite) does not reach the row.
"""
from __future__ import annotations

import math

import torch

from . import masks
from ..args.attention import check_reference_args, softmax_scale, takes_is_causal

__all__ = ["attention_reference", "expand_kv"]


def expand_kv(x: torch.Tensor, h: int) -> torch.Tensor:
    """Repeat key/value heads so that each of the ``h`` query heads has its own."""
    hkv = x.shape[1]
    if h % hkv:
        raise ValueError(f"query heads ({h}) must be a multiple of key/value heads "
                         f"({hkv})")
    return x.repeat_interleave(h // hkv, dim=1)


@takes_is_causal
def attention_reference(q, k, v, *, scale=None, is_causal=False, attn_mask=None,
                        key_lengths=None, float64=False, return_lse=False, **mask):
    """softmax(q kᵀ · scale + mask) v, computed the obvious way.

    scale: defaults to 1/sqrt(D).  is_causal, key_lengths, attn_mask and ``mask``
    (stride=, window=): see :mod:`attnbook.masks` (the causal mask is aligned
    bottom-right).  float64:
    compute and return in float64.  return_lse: also return the log-sum-exp of each
    row, ``[B, H, Sq]``.
    """
    check_reference_args(q, k, v, scale=scale, is_causal=is_causal, attn_mask=attn_mask,
                         key_lengths=key_lengths, **mask)
    b, h, sq, d = q.shape
    sk = k.shape[2]
    dtype = torch.float64 if float64 else q.dtype
    work = torch.float64 if float64 else torch.promote_types(q.dtype, torch.float32)
    scale = softmax_scale(scale, d, float32=False)

    qf, kf, vf = (t.to(work) for t in (q, expand_kv(k, h), expand_kv(v, h)))
    s = (qf @ kf.transpose(-1, -2)) * scale
    finite = bool(torch.isfinite(s).all())
    bias = masks.bias(b, h, sq, sk, attn_mask=attn_mask, is_causal=is_causal,
                      key_lengths=key_lengths, dtype=work, device=q.device, **mask)
    # A masked key is absent: its score is -inf whatever q·k is (a NaN in q·k, or an
    # inf meeting the mask's -inf, would otherwise survive the mask).
    absent = None if finite else bias == -math.inf
    s = s + bias
    del bias
    if absent is not None:
        s = s.masked_fill(absent, -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    m_safe = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    p = torch.exp(s - m_safe)
    l = p.sum(dim=-1, keepdim=True)
    out = (p @ vf) / torch.where(l > 0, l, torch.ones_like(l))
    out = out.to(dtype)
    if not return_lse:
        return out
    lse = (m + torch.log(l)).squeeze(-1)
    lse = torch.where(l.squeeze(-1) > 0, lse, torch.full_like(lse, float("-inf")))
    return out, lse.to(torch.float64 if float64 else torch.float32)
