"""FlashAttention-2's forward pass (Dao, 2023, Algorithm 1) in PyTorch, one tile at a
time.

This is the algorithm the fused kernel of chapter 7 runs, written so that every
intermediate can be looked at: the outer loop over query tiles of ``block_q`` rows, the
inner loop over key tiles of ``block_k`` columns, and per query row the running max
``m``, running sum ``l`` and unnormalised output ``acc``. No [Sq, Sk] tensor is ever
formed: the mask too is built tile by tile."""
from __future__ import annotations

import math

import torch

from . import masks
from .attention import expand_kv
from ..args.attention import (check_positive_int, check_reference_args,
                              takes_is_causal)

__all__ = ["flash_attention_tiles"]


@takes_is_causal
def flash_attention_tiles(q, k, v, *, block_q=16, block_k=16, scale=None,
                          is_causal=False, attn_mask=None, key_lengths=None,
                          paper_typo=False, trace=None, **mask):
    """Returns ``(o, lse)`` for q: [B, H, Sq, D] and k, v: [B, Hkv, Sk, D], computed
    tile by tile; any dtype (float64 for checks). Masks as in
    :func:`attnbook.attention_reference`.

    ``paper_typo=True`` rescales the running output by ``diag(exp(m_old - m_new))^-1``,
    as line 10 of the published Algorithm 1 reads, not by ``diag(exp(m_old - m_new))``.
    ``trace``, a list, receives a record per (query tile, key tile) of batch 0, head 0
    (see :func:`_tile_record`).
    """
    check_reference_args(q, k, v, scale=scale, is_causal=is_causal, attn_mask=attn_mask,
                         key_lengths=key_lengths, **mask)
    block_q, block_k = (check_positive_int(n, name) for n, name in
                        ((block_q, "block_q"), (block_k, "block_k")))
    b, h, sq, d = q.shape
    sk = k.shape[2]
    k, v = expand_kv(k, h), expand_kv(v, h)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    rules = dict(attn_mask=attn_mask, is_causal=is_causal, key_lengths=key_lengths,
                 dtype=q.dtype, device=q.device, **mask)
    o = torch.zeros_like(q)
    lse = torch.full((b, h, sq), -math.inf, dtype=q.dtype, device=q.device)
    for i, r0 in enumerate(range(0, sq, block_q)):
        rows = slice(r0, min(r0 + block_q, sq))
        qi = q[:, :, rows] * scale
        n = qi.shape[2]
        m = torch.full((b, h, n), -math.inf, dtype=q.dtype, device=q.device)
        l = torch.zeros(b, h, n, dtype=q.dtype, device=q.device)
        acc = torch.zeros(b, h, n, d, dtype=q.dtype, device=q.device)
        for j, c0 in enumerate(range(0, sk, block_k)):
            cols = slice(c0, min(c0 + block_k, sk))
            bias = masks.bias(b, h, sq, sk, rows=rows, cols=cols, **rules)
            skipped = bool(torch.isneginf(bias).all())   # the mask excludes the tile
            if not skipped:
                s = qi @ k[:, :, cols].mT + bias                   # S_ij: [B, H, n, Bc]
                m_new = torch.maximum(m, s.amax(-1))
                shift = torch.where(torch.isneginf(m_new), 0.0, m_new)  # no key yet: 0
                p = torch.exp(s - shift[..., None])                # exp(S_ij - m_new)
                alpha = torch.exp(m - shift)                       # exp(m_old - m_new)
                l = alpha * l + p.sum(-1)
                if paper_typo:
                    alpha = 1.0 / alpha
                acc = alpha[..., None] * acc + p @ v[:, :, cols]
                m = m_new
            if trace is not None:
                trace.append(_tile_record(i, j, rows, cols, skipped, m, l, acc))
        empty = l == 0                              # no admissible key: zeros, lse -inf
        l_safe = torch.where(empty, 1.0, l)
        o[:, :, rows] = torch.where(empty[..., None], 0.0, acc / l_safe[..., None])
        lse[:, :, rows] = torch.where(empty, -math.inf, m + torch.log(l_safe))
    return o, lse


def _tile_record(i, j, rows, cols, skipped, m, l, acc):
    """What the chapter's stepper draws after tile (i, j), for batch 0, head 0: which
    tile, whether it was skipped, and the rows' m, l and normalised partial output."""
    with torch.no_grad():
        l0 = l[0, 0, :, None]
        partial = torch.where(l0 > 0, acc[0, 0] / torch.where(l0 > 0, l0, 1.0), 0.0)
    return dict(q_tile=i, k_tile=j, rows=(rows.start, rows.stop),
                cols=(cols.start, cols.stop), skipped=skipped, m=m[0, 0].clone(),
                l=l[0, 0].clone(), partial=partial.clone())
