"""The KV cache's append kernel (``kernels/kv_cache.cu``) as the registered op
``torch.ops.attnbook.kv_cache_append``: it writes into the caches in place."""
from __future__ import annotations

from typing import Optional

import torch

from ..args.decode import kvcache_args
from .registry import extension

__all__ = ["kv_cache_append", "kv_cache_append_op"]


@torch.library.custom_op("attnbook::kv_cache_append",
                         mutates_args=("k_cache", "v_cache"))
def kv_cache_append_op(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor,
                       v: torch.Tensor, cache_seqlens: torch.Tensor,
                       block_table: Optional[torch.Tensor]) -> None:
    """Write k, v [B, Hkv, Sn, D] into the caches at positions cache_seqlens[b]
    … + Sn − 1, on checked inputs (see
    :func:`~attnbook.args.decode.kvcache_args`)."""
    table = k.new_empty(0, dtype=torch.int32) if block_table is None else block_table
    module = extension("kv_cache").module(k.device)
    module.append(k_cache, v_cache, k, v, cache_seqlens, table)


@kv_cache_append_op.register_fake
def _(k_cache, v_cache, k, v, cache_seqlens, block_table):
    return None


def kv_cache_append(k_cache, v_cache, k, v, *, cache_seqlens=None, block_table=None,
                    plan=None):
    """Write the new keys and values k, v [B, Hkv, Sn, D] into the caches in place, at
    positions cache_seqlens[b] … cache_seqlens[b] + Sn − 1 of each sequence: a
    contiguous cache [B, Hkv, max_len, D], or with ``block_table`` [B, max_blocks] a
    pool of pages [num_blocks, Hkv, block_size, D]. Like
    :func:`attnbook.attention_with_kvcache`, it does not advance the lengths (and
    takes a host mirror of them, or a ``plan``, alike). Every position and page is
    checked before anything is written."""
    if not isinstance(k, torch.Tensor) or k.dim() != 4:
        what = tuple(k.shape) if isinstance(k, torch.Tensor) else type(k).__name__
        raise TypeError(f"k must be a [B, Hkv, Sn, D] tensor, got {what}")
    # The checks of attention_with_kvcache, with k standing in for a query per new
    # token.
    a = kvcache_args(k, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens,
                     block_table=block_table, plan=plan)
    if a.k.numel():
        kv_cache_append_op(k_cache, v_cache, a.k, a.v, a.cache_seqlens, a.block_table)
