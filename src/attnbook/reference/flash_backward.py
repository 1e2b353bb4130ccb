"""FlashAttention-2's backward pass (Dao, 2023, Algorithm 2) in PyTorch, one tile at a
time, and an autograd function that pairs it with the tile-by-tile forward.

Nothing of size Sq x Sk is stored between the passes: the forward keeps only o and the
log-sum-exp L, and the backward recomputes each tile of probabilities as
P_ij = exp(S_ij − L_i). With D_i = rowsum(dO_i ∘ O_i),

    dV_j += P_ijᵀ dO_i        dP_ij = dO_i V_jᵀ        dS_ij = P_ij ∘ (dP_ij − D_i)
    dQ_i += dS_ij K_j · scale                           dK_j += dS_ijᵀ Q_i · scale

The outer loop runs over key tiles j (each owns its dK_j, dV_j), the inner one over
query tiles i, as in the paper. Grouped heads: the dK, dV of a key/value head are the
sums over the query heads that share it."""
from __future__ import annotations

import math

import torch

from . import masks
from .attention import expand_kv
from ..args.attention import (check_positive_int, check_reference_args,
                              takes_is_causal)
from .flash_tiles import flash_attention_tiles

__all__ = ["flash_backward_tiles", "FlashAttentionTiles", "attention_tiles_autograd"]


def _group_sum(x: torch.Tensor, hkv: int) -> torch.Tensor:
    """[B, H, S, D] gradients of expanded keys or values, summed back to
    [B, Hkv, S, D]."""
    b, h, s, d = x.shape
    return x.reshape(b, hkv, h // hkv, s, d).sum(2)


@takes_is_causal
def flash_backward_tiles(q, k, v, o, lse, do, *, block_q=16, block_k=16, scale=None,
                         is_causal=False, attn_mask=None, key_lengths=None,
                         dlse=None, **mask):
    """(dq, dk, dv) of attention for the upstream gradient ``do`` [B, H, Sq, D] (and
    ``dlse`` [B, H, Sq] of the log-sum-exp, if it was used), from the forward's ``o``
    and ``lse``, computed tile by tile; any dtype. Masks as in
    :func:`attnbook.attention_reference`."""
    check_reference_args(q, k, v, scale=scale, is_causal=is_causal, attn_mask=attn_mask,
                         key_lengths=key_lengths, **mask)
    block_q, block_k = (check_positive_int(n, name) for n, name in
                        ((block_q, "block_q"), (block_k, "block_k")))
    b, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    ke, ve = expand_kv(k, h), expand_kv(v, h)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    rules = dict(attn_mask=attn_mask, is_causal=is_causal, key_lengths=key_lengths,
                 dtype=q.dtype, device=q.device, **mask)
    # D_i = Σ_d dO_id O_id = Σ_j P_ij dP_ij; a gradient of L adds P_ij · dL_i to dS_ij.
    delta = (do * o).sum(-1)
    if dlse is not None:
        delta = delta - dlse
    empty = torch.isneginf(lse)            # rows with no admissible key: P = 0
    lse_safe = torch.where(empty, 0.0, lse)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(ke), torch.zeros_like(ve)
    for c0 in range(0, sk, block_k):       # outer loop: key tiles, each owns dK_j, dV_j
        cols = slice(c0, min(c0 + block_k, sk))
        kj, vj = ke[:, :, cols], ve[:, :, cols]
        for r0 in range(0, sq, block_q):   # inner loop: query tiles
            rows = slice(r0, min(r0 + block_q, sq))
            bias = masks.bias(b, h, sq, sk, rows=rows, cols=cols, **rules)
            if bool(torch.isneginf(bias).all()):
                continue                     # the mask excludes the tile
            qi, doi = q[:, :, rows], do[:, :, rows]
            s = qi @ kj.mT * scale + bias
            p = torch.exp(s - lse_safe[:, :, rows, None])
            p = torch.where(empty[:, :, rows, None], 0.0, p)
            dv[:, :, cols] += p.mT @ doi
            dp = doi @ vj.mT
            ds = p * (dp - delta[:, :, rows, None])
            dq[:, :, rows] += ds @ kj * scale
            dk[:, :, cols] += ds.mT @ qi * scale
    return dq, _group_sum(dk, hkv), _group_sum(dv, hkv)


class FlashAttentionTiles(torch.autograd.Function):
    """Algorithm 1 forward and Algorithm 2 backward, tile by tile: attention whose
    gradients come from the tiled backward rather than from autograd's graph."""

    @staticmethod
    def forward(ctx, q, k, v, options):
        o, lse = flash_attention_tiles(q, k, v, **options)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = options
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward_tiles(q, k, v, o, lse, do, **ctx.options)
        return dq, dk, dv, None


@takes_is_causal
def attention_tiles_autograd(q, k, v, *, block_q=16, block_k=16, scale=None,
                             is_causal=False, key_lengths=None, attn_mask=None,
                             **mask):
    """softmax(q kᵀ · scale + mask) v, differentiable through Algorithm 2."""
    options = dict(block_q=block_q, block_k=block_k, scale=scale, is_causal=is_causal,
                   key_lengths=key_lengths, attn_mask=attn_mask, **mask)
    return FlashAttentionTiles.apply(q, k, v, options)
