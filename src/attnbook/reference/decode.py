"""Decoding with a KV cache, the obvious way: the yardstick of ``kernels/kv_cache.cu``
and ``kernels/decode.cu``.

Independent of the kernels' arithmetic: the new keys and values are written position by
position into copies of the caches (through the block table when there is one), each
sequence's keys are gathered into a contiguous [Hkv, L_b, D] tensor, and
:func:`~attnbook.reference.attention_reference` attends to them, causal aligned
bottom-right to the sequence's own length.
"""
from __future__ import annotations

import torch

from .attention import attention_reference
from ..args.attention import FLOATS, takes_is_causal
from ..args.decode import kvcache_args

__all__ = ["kv_cache_append_reference", "gather_kv", "attention_with_kvcache_reference"]


def _slot(block_table, block_size, b, pos):
    """(page, slot) of position pos of sequence b: row b of a contiguous cache, or the
    page the block table names."""
    if block_table is None:
        return b, pos
    return int(block_table[b, pos // block_size]), pos % block_size


def kv_cache_append_reference(k_cache, v_cache, k, v, cache_seqlens, block_table=None):
    """Copies of the caches with k, v [B, Hkv, Sn, D] written at positions
    cache_seqlens[b] … cache_seqlens[b] + Sn − 1 of each sequence b."""
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    block_size = k_cache.shape[2]
    for b, n in enumerate(torch.as_tensor(cache_seqlens).tolist()):
        for s in range(k.shape[2]):
            page, slot = _slot(block_table, block_size, b, n + s)
            k_cache[page, :, slot] = k[b, :, s]
            v_cache[page, :, slot] = v[b, :, s]
    return k_cache, v_cache


def gather_kv(cache, length, b, block_table=None):
    """The first ``length`` positions of sequence b, as a [Hkv, length, D] tensor."""
    block_size = cache.shape[2]
    rows = [cache[page, :, slot] for page, slot in
            (_slot(block_table, block_size, b, pos) for pos in range(length))]
    if not rows:
        return cache.new_empty(cache.shape[1], 0, cache.shape[3])
    return torch.stack(rows, dim=1)


@takes_is_causal
def attention_with_kvcache_reference(q, k_cache, v_cache, k=None, v=None, *,
                                     cache_seqlens=None, block_table=None,
                                     plan=None, is_causal=True, scale=None,
                                     return_lse=False, return_caches=False):
    """What :func:`attnbook.attention_with_kvcache` computes, in float64, leaving the
    caches untouched: o [B, H, Sq, D] (and the log-sum-exp [B, H, Sq] if ``return_lse``,
    the updated copies of the caches if ``return_caches``). Arguments as there."""
    a = kvcache_args(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens,
                     block_table=block_table, plan=plan, is_causal=is_causal,
                     scale=scale,
                     dtypes=FLOATS)
    table = None if a.block_table is None else a.block_table.cpu()
    if a.k is not None:
        k_cache, v_cache = kv_cache_append_reference(k_cache, v_cache, a.k, a.v,
                                                     a.lengths, table)
    b, h, sq, d = q.shape
    o = torch.zeros(b, h, sq, d, dtype=torch.float64, device=q.device)
    lse = torch.full((b, h, sq), float("-inf"), dtype=torch.float64, device=q.device)
    for i, n in enumerate(a.lengths):
        n += a.new_keys
        if n == 0:
            continue   # no key: zeros, and -inf
        kb = gather_kv(k_cache, n, i, table)[None].double()
        vb = gather_kv(v_cache, n, i, table)[None].double()
        o[i], lse[i] = (t[0] for t in attention_reference(
            q[i:i + 1].double(), kb, vb, is_causal=is_causal, scale=a.scale,
            float64=True, return_lse=True))
    out = (o, lse) if return_lse else (o,)
    out += (k_cache, v_cache) if return_caches else ()
    return out[0] if len(out) == 1 else out
