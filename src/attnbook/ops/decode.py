"""Decoding with a KV cache: the kernels of ``kernels/decode.cu`` (single-query decode,
split-K, combine) as the registered op ``torch.ops.attnbook.decode_attention``, the
split heuristic, and :func:`attention_with_kvcache`, which mirrors FlashAttention's
``flash_attn_with_kvcache`` in the book's [B, H, S, D] layout."""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..args.attention import takes_is_causal
from ..args.decode import MAX_SPLITS, ROWS_PER_BLOCK, kvcache_args
from ..toolchain.devices import GPUS
from .kv_cache import kv_cache_append_op
from .registry import extension

__all__ = ["attention_with_kvcache", "decode_attention", "num_splits_heuristic",
           "choose_num_splits", "sm_count", "DECODE_HEAD_DIMS", "EMULATED_SM_COUNT",
           "KEYS_PER_SPLIT", "BLOCKS_PER_SM"]

DECODE_HEAD_DIMS = (32, 64, 96, 128)
# The emulator has no SMs; the heuristic then plans for an A100's 108, so that the CPU
# runs the same launches (and gives the same answers) as that GPU would.
EMULATED_SM_COUNT = GPUS["A100"].sms
KEYS_PER_SPLIT = 128   # a split gets at least this many keys: 4 tiles of the kernel
# The blocks the heuristic plans per SM. FlashAttention counts two for its 128-thread
# blocks (its num_splits_heuristic is given twice the SM count); the decode kernel's
# blocks are 128 threads too, with __launch_bounds__(128, 2). On an H200 (chapter 9's
# recorded run), 128 blocks read 230 GB/s and 512 blocks 425 GB/s: one a SM is too few.
BLOCKS_PER_SM = 2


@torch.library.custom_op("attnbook::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     cache_seqlens: torch.Tensor, block_table: Optional[torch.Tensor],
                     new_keys: int, num_splits: int, causal: bool,
                     scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of q [B, H, Sq, D] to the first cache_seqlens[b] + new_keys positions
    of each sequence's cache, on checked inputs (see
    :func:`~attnbook.args.decode.kvcache_args`): o [B, H, Sq, D] in q's
    dtype and the log-sum-exp [B, H, Sq] in float32."""
    table = q.new_empty(0, dtype=torch.int32) if block_table is None else block_table
    module = extension("decode").module(q.device)
    return tuple(module.decode(q, k_cache, v_cache, cache_seqlens, table, new_keys,
                               num_splits, causal, scale))


@decode_attention.register_fake
def _(q, k_cache, v_cache, cache_seqlens, block_table, new_keys, num_splits, causal,
      scale):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)


def sm_count(device) -> int:
    """The GPU's streaming multiprocessors, or :data:`EMULATED_SM_COUNT` on the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return EMULATED_SM_COUNT


def num_splits_heuristic(blocks: int, key_chunks: int, num_sms: int,
                         max_splits: int = MAX_SPLITS) -> int:
    """FlashAttention's rule for split-K. ``blocks`` thread blocks run without splitting
    (B · Hkv · row groups); ``key_chunks`` is how many splits the longest sequence can
    feed; ``num_sms``, the blocks the GPU runs at once in the rule's terms
    (FlashAttention and :func:`choose_num_splits` pass :data:`BLOCKS_PER_SM` times the
    SM count).

    If the blocks already fill 80% of ``num_sms``, splitting only adds the combine: 1.
    Otherwise each candidate s gives blocks·s blocks, i.e. blocks·s / num_sms waves, the
    last one partly idle; its efficiency is waves / ceil(waves). Take the smallest s
    within 85% of the best efficiency (more splits mean more partial states to write and
    merge), skipping any s that gives the same chunk size as s − 1."""
    if blocks <= 0 or blocks >= 0.8 * num_sms:   # nothing to run, or the GPU is full
        return 1
    max_splits = max(1, min(max_splits, num_sms, key_chunks))
    efficiency = {}
    for s in range(1, max_splits + 1):
        if s > 1 and math.ceil(key_chunks / s) == math.ceil(key_chunks / (s - 1)):
            continue
        waves = blocks * s / num_sms
        efficiency[s] = waves / math.ceil(waves)
    best = max(efficiency.values())
    return min(s for s, e in efficiency.items() if e >= 0.85 * best)


def choose_num_splits(batch: int, kv_heads: int, rows: int, max_keys: int,
                      device) -> int:
    """The number of splits for B = ``batch`` sequences of ``kv_heads`` kv heads,
    ``rows`` query rows per kv head (G · Sq) and at most ``max_keys`` keys per
    sequence."""
    blocks = batch * kv_heads * -(-rows // ROWS_PER_BLOCK)
    chunks = max(1, -(-max_keys // KEYS_PER_SPLIT))
    return num_splits_heuristic(blocks, chunks, BLOCKS_PER_SM * sm_count(device))


@takes_is_causal
def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens=None,
                           block_table=None, plan=None, num_splits=None,
                           is_causal=True, scale=None, return_softmax_lse=False):
    """Attention for decoding, FlashAttention's ``flash_attn_with_kvcache`` in the
    book's [B, H, S, D] layout.

    q: [B, H, Sq, D], a few new queries per sequence (1, or more when speculating).
    k_cache, v_cache: the cache, written in place, either contiguous
    [B, Hkv, max_len, D] or, with ``block_table`` (int32 [B, max_blocks]), a pool of
    pages [num_blocks, Hkv, block_size, D] where entry (b, j) names the page holding
    positions j·block_size … (j+1)·block_size − 1 of sequence b. H must be a multiple of
    Hkv.
    k, v: optional [B, Hkv, Sq, D], the new tokens' keys and values: written first at
    positions cache_seqlens[b] … cache_seqlens[b] + Sq − 1.
    cache_seqlens: int32/int64 [B] (or an int for all), the tokens already in the cache;
    it is not advanced here. Each sequence attends its first cache_seqlens[b]
    (+ Sq if k, v are given) positions; ``is_causal`` aligns the queries bottom-right to
    that length, so new query i sees keys j ≤ cache_seqlens[b] + i. A sequence with no
    key gives zeros.
    cache_seqlens and block_table may live on the CPU beside a GPU cache (the host's
    mirror: nothing is then read back from the GPU to check them). plan: in their
    place, a :class:`~attnbook.args.decode.KVCachePlan` from
    :func:`attnbook.plan_kvcache`, checked once for every layer of a step.
    num_splits: None (a heuristic from B·Hkv, the length and the SM count) or 1 … 128.
    dtypes: float32, float16, bfloat16 (fp32 arithmetic); head_dim 32, 64, 96 or 128.

    Returns o [B, H, Sq, D] (and the float32 log-sum-exp [B, H, Sq] if
    ``return_softmax_lse``). Everything is checked before the cache is touched.
    """
    a = kvcache_args(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens,
                     block_table=block_table, plan=plan, num_splits=num_splits,
                     is_causal=is_causal, scale=scale)
    d = q.shape[-1]
    if d not in DECODE_HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported by the decode kernel: "
                         f"use one of {DECODE_HEAD_DIMS}")
    if a.k is not None and a.k.numel():
        kv_cache_append_op(k_cache, v_cache, a.k, a.v, a.cache_seqlens, a.block_table)
    splits = a.num_splits
    if splits is None:
        b, h, sq, _ = q.shape
        splits = choose_num_splits(b, k_cache.shape[1], h // k_cache.shape[1] * sq,
                                   a.max_keys, q.device)
    o, lse = decode_attention(a.q, k_cache, v_cache, a.cache_seqlens, a.block_table,
                              a.new_keys, splits, a.causal, a.scale)
    return (o, lse) if return_softmax_lse else o
