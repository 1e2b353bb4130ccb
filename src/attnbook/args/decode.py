"""The one input check of decoding with a KV cache:
:func:`attnbook.attention_with_kvcache` (the kernels) and its reference take and refuse
the same arguments.

Everything is checked here, before any launch: types, dtypes, shapes, devices, and the
values the kernels would otherwise trust — every sequence length, every position the new
tokens are written to, every page of the block table that is read or written. A cache is
written in place, so an error found after the append would leave it half-changed; none
is.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from .attention import (INT32_MAX, check_positive_int, check_same_device,
                        check_tensor, softmax_scale)

__all__ = ["KVCacheArgs", "kvcache_args", "MAX_SPLITS", "ROWS_PER_BLOCK"]

INTEGER_DTYPES = (torch.int32, torch.int64)
MAX_SPLITS = 128       # as FlashAttention: more splits than this never pays
ROWS_PER_BLOCK = 32    # kernels/decode.cu's kDecodeRows: query rows sharing one kv head
KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass
class KVCacheArgs:
    """Checked decode inputs, as the kernels take them: q [B, H, Sq, D] (head dim
    contiguous), the caches as given, k and v [B, Hkv, Sq, D] or None, cache_seqlens as
    int32 [B], block_table as int32 [B, max_blocks] (contiguous) or None, and the Python
    values the host needs (lengths before the append, capacity, and the rest)."""
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    k: torch.Tensor | None
    v: torch.Tensor | None
    cache_seqlens: torch.Tensor
    block_table: torch.Tensor | None
    lengths: list            # cache_seqlens as Python ints (empty on the meta device)
    new_keys: int            # Sn: tokens appended per sequence (0 without k, v)
    capacity: int            # positions a sequence can hold
    block_size: int          # positions per page (contiguous cache: max_len)
    causal: bool
    scale: float
    num_splits: int | None

    @property
    def paged(self) -> bool:
        return self.block_table is not None

    @property
    def max_keys(self) -> int:
        """The most keys any sequence attends (after the append)."""
        return max(self.lengths, default=0) + self.new_keys


def _shape(t):
    return tuple(t.shape)


def _check_float(t, name, q_dtype, dtypes):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    check_tensor(t, name, dtypes)
    if t.dtype != q_dtype:
        raise TypeError(f"{name} must have q's dtype {q_dtype}, got {t.dtype}")
    if t.dim() != 4:
        raise ValueError(f"{name} must be 4-D, got shape {_shape(t)}")


def _integer_tensor(x, name):
    if not isinstance(x, torch.Tensor) or x.dtype not in INTEGER_DTYPES:
        what = getattr(x, "dtype", type(x).__name__)
        raise TypeError(f"{name} must be an int32 or int64 tensor, got {what}")


def kvcache_args(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens,
                 block_table=None, num_splits=None, is_causal=True, scale=None,
                 dtypes=KERNEL_DTYPES) -> KVCacheArgs:
    """Check the arguments of :func:`attnbook.attention_with_kvcache` and return them as
    the kernels take them. Raises TypeError, ValueError or NotImplementedError with a
    message that names the argument, before anything is written."""
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a tensor, got {type(q).__name__}")
    check_tensor(q, "q", dtypes)
    if q.dim() != 4:
        raise ValueError(f"q must be [B, H, Sq, D], got shape {_shape(q)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        _check_float(t, name, q.dtype, dtypes)
    if k_cache.shape != v_cache.shape:
        raise ValueError("k_cache and v_cache must have one shape, got "
                         f"{_shape(k_cache)} and {_shape(v_cache)}")
    if (k is None) != (v is None):
        raise ValueError("k and v must be given together (the new keys and values) or "
                         "not at all")
    if k is not None:
        for name, t in (("k", k), ("v", v)):
            _check_float(t, name, q.dtype, dtypes)
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {is_causal!r}")
    if scale is not None and (isinstance(scale, bool)
                              or not isinstance(scale, numbers.Real)):
        raise TypeError(f"scale must be a number or None, got {scale!r}")
    if num_splits is not None:
        num_splits = check_positive_int(num_splits, "num_splits")
        if num_splits > MAX_SPLITS:
            raise ValueError(f"num_splits must be at most {MAX_SPLITS}, "
                             f"got {num_splits}")
    if block_table is not None:
        _integer_tensor(block_table, "block_table")
    if (isinstance(cache_seqlens, numbers.Integral)
            and not isinstance(cache_seqlens, bool)):
        # One length for every sequence; beyond ±2^62 it is out of range either way.
        n = max(-1, min(int(cache_seqlens), 2**62))
        cache_seqlens = torch.full((q.shape[0],), n, dtype=torch.int64, device=q.device)
    _integer_tensor(cache_seqlens, "cache_seqlens")
    check_same_device(dict(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v,
                           cache_seqlens=cache_seqlens, block_table=block_table))

    b, h, sq, d = q.shape
    shapes = f"q {_shape(q)}, k_cache {_shape(k_cache)}"
    hkv = k_cache.shape[1]
    if k_cache.shape[3] != d:
        raise ValueError(f"the caches' head_dim must be q's D={d}: {shapes}")
    if hkv == 0 or h % hkv:
        raise ValueError(f"query heads ({h}) must be a multiple of the caches' "
                         f"key/value heads ({hkv}): {shapes}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1 and d > 1:
            raise ValueError(f"{name}'s head dimension must be contiguous (the cache "
                             "is written in place, so it cannot be copied)")
    if k_cache.data_ptr() == v_cache.data_ptr() and k_cache.numel() and \
            k_cache.device.type != "meta":
        raise ValueError("k_cache and v_cache must be different tensors")
    if block_table is None:
        if k_cache.shape[0] != b:
            raise ValueError("a contiguous cache is [B, Hkv, max_len, D] with q's "
                             f"B={b}: {shapes} (a paged cache needs block_table)")
        block_size = capacity = k_cache.shape[2]
    else:
        if block_table.dim() != 2 or block_table.shape[0] != b:
            raise ValueError(f"block_table must be [B, max_blocks] with q's B={b}, got "
                             f"{_shape(block_table)}")
        block_size = k_cache.shape[2]
        if block_size == 0:
            raise ValueError(f"pages must hold at least one position: k_cache {shapes}")
        capacity = block_table.shape[1] * block_size
        if k_cache.shape[0] > INT32_MAX:
            raise ValueError(f"the pool has {k_cache.shape[0]} pages; the kernels "
                             f"index at most {INT32_MAX}")
    if capacity > INT32_MAX - 64:
        raise ValueError(f"a sequence's capacity of {capacity} positions exceeds the "
                         f"kernels' 32-bit limit ({INT32_MAX - 64})")
    new_keys = 0
    if k is not None:
        want = (b, hkv, sq, d)
        for name, t in (("k", k), ("v", v)):
            if _shape(t) != want:
                raise ValueError(f"{name} must be [B, Hkv, Sq, D] = {list(want)} "
                                 "(the new tokens, one per query row), "
                                 f"got {_shape(t)}")
        new_keys = sq
    if b * hkv > INT32_MAX or h * sq > INT32_MAX or \
            -(-(h // hkv) * sq // ROWS_PER_BLOCK) > 65535:
        raise ValueError(f"too many heads or rows for the kernels' grid: {shapes}")
    if cache_seqlens.shape != (b,):
        raise ValueError(f"cache_seqlens must have shape [B] = [{b}], got "
                         f"{_shape(cache_seqlens)}")

    lengths, table = [], None
    if q.device.type != "meta":
        lengths = [int(x) for x in cache_seqlens.tolist()]
        for i, n in enumerate(lengths):
            if n < 0:
                raise ValueError(f"cache_seqlens[{i}] = {n} is negative")
            if n + new_keys > capacity:
                what = f" plus {new_keys} new tokens" if new_keys else ""
                raise ValueError(f"cache_seqlens[{i}] = {n}{what} exceeds the cache's "
                                 f"capacity of {capacity} positions")
        if block_table is not None:
            table = _check_pages(block_table, lengths, new_keys, block_size,
                                 k_cache.shape[0])
    elif block_table is not None:
        table = block_table.to(torch.int32)
    seqlens32 = cache_seqlens.to(torch.int32).contiguous() if q.device.type == "meta" \
        else torch.tensor(lengths, dtype=torch.int32).to(q.device)
    scale = softmax_scale(scale, d)
    q4 = q if q.stride(-1) == 1 or d <= 1 else q.contiguous()
    if k is not None:
        k, v = (t if t.stride(-1) == 1 or d <= 1 else t.contiguous() for t in (k, v))
    return KVCacheArgs(q4, k_cache, v_cache, k, v, seqlens32, table, lengths, new_keys,
                       capacity, block_size, is_causal, scale, num_splits)


def _check_pages(block_table, lengths, new_keys, block_size, num_pages):
    """The block table as contiguous int32, after checking every entry a kernel will
    use: those that hold a sequence's keys, old and new. No page may receive new tokens
    of two sequences (or twice for one): those writes would race. One copy to the host
    and tensor operations, whatever the number of tokens (a prefill appends thousands
    per layer)."""
    table = block_table.cpu().long()
    n = torch.tensor(lengths, dtype=torch.long)
    used = (n + new_keys + block_size - 1) // block_size
    in_use = torch.arange(table.shape[1])[None, :] < used[:, None]
    bad = (in_use & ((table < 0) | (table >= num_pages))).nonzero()
    if len(bad):
        b, j = bad[0].tolist()
        raise ValueError(f"block_table[{b}, {j}] = {int(table[b, j])} is outside the "
                         f"pool of {num_pages} pages")
    if new_keys:
        pos = n[:, None] + torch.arange(new_keys)[None, :]        # [B, new] positions
        slot = (table.gather(1, pos // block_size) * block_size
                + pos % block_size).flatten()                      # (page, slot) as one
        slot, order = slot.sort(stable=True)   # stable: writers of a slot in call order
        twice = (slot[1:] == slot[:-1]).nonzero().flatten()
        if len(twice):   # the first second writer, as a loop over (b, pos) meets it
            i = int(twice[order[twice + 1].argmin()])
            first, second = (int(order[i]) // new_keys, int(order[i + 1]) // new_keys)
            page, where = divmod(int(slot[i]), block_size)
            raise ValueError(f"page {page} slot {where} would receive two new tokens "
                             f"(sequences {first} and {second}): the pages written in "
                             "one call must not be shared")
    # Entries past a sequence's pages are never read: clamped, they narrow safely.
    return table.clamp(-1, num_pages).to(torch.int32).contiguous().to(
        block_table.device)
