"""The one input check of decoding with a KV cache:
:func:`attnbook.attention_with_kvcache` (the kernels) and its reference take and refuse
the same arguments.

Everything is checked here, before any launch: types, dtypes, shapes, devices, and the
values the kernels would otherwise trust — every sequence length, every position the new
tokens are written to, every page of the block table that is read or written. A cache is
written in place, so an error found after the append would leave it half-changed; none
is.

Checking values means reading them on the host. The lengths and the block table may be
given there (CPU tensors beside a GPU cache: a host mirror, as serving stacks keep), and
the positions of one step may be checked once for every layer that shares them
(:func:`plan_kvcache`, as FlashInfer's ``plan`` before its per-layer ``run``): then no
layer reads anything back from the GPU or checks a page again.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from .attention import (INT32_MAX, check_positive_int, check_same_device,
                        check_tensor, softmax_scale)

__all__ = ["KVCacheArgs", "KVCachePlan", "kvcache_args", "plan_kvcache", "MAX_SPLITS",
           "ROWS_PER_BLOCK"]

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


@dataclass(eq=False, frozen=True)
class KVCachePlan:
    """The checked positions of one call, for every layer whose caches share them (the
    layers of a model hold the same positions): made by :func:`plan_kvcache`, passed as
    ``plan=`` to :func:`attnbook.attention_with_kvcache` and
    :func:`attnbook.kv_cache_append` in place of ``cache_seqlens`` and
    ``block_table``."""
    cache_seqlens: torch.Tensor        # int32 [B] on the caches' device
    block_table: torch.Tensor | None   # int32 [B, max_blocks], contiguous, there too
    lengths: tuple                     # cache_seqlens as Python ints (empty on meta)
    new_keys: int                      # tokens appended per sequence
    capacity: int                      # positions a sequence can hold
    block_size: int                    # positions per page (contiguous: max_len)
    cache_rows: int                    # k_cache.shape[0]: B, or the pool's pages
    device: torch.device

    @property
    def batch(self) -> int:
        return self.cache_seqlens.shape[0]


def kvcache_args(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens=None,
                 block_table=None, plan=None, num_splits=None, is_causal=True,
                 scale=None, dtypes=KERNEL_DTYPES) -> KVCacheArgs:
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
    check_same_device(dict(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v))

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
    if plan is None:
        plan = _plan(k_cache, cache_seqlens, block_table, new_keys, b, "q's B")
    else:
        _check_plan(plan, cache_seqlens, block_table, k_cache, b, new_keys)
    scale = softmax_scale(scale, d)
    q4 = q if q.stride(-1) == 1 or d <= 1 else q.contiguous()
    if k is not None:
        k, v = (t if t.stride(-1) == 1 or d <= 1 else t.contiguous() for t in (k, v))
    return KVCacheArgs(q4, k_cache, v_cache, k, v, plan.cache_seqlens,
                       plan.block_table, list(plan.lengths), new_keys, plan.capacity,
                       plan.block_size, is_causal, scale, num_splits)


def plan_kvcache(k_cache, cache_seqlens, block_table=None, *,
                 new_tokens=0) -> KVCachePlan:
    """Check the positions of one call once, for every layer whose caches have
    ``k_cache``'s shape and device: ``cache_seqlens`` and ``block_table`` as
    :func:`attnbook.attention_with_kvcache` takes them, with ``new_tokens`` appended
    per sequence. Given as CPU tensors beside a GPU cache (a host mirror), nothing is
    read back from the GPU: they are copied there once, asynchronously."""
    if not isinstance(k_cache, torch.Tensor) or k_cache.dim() != 4:
        what = _shape(k_cache) if isinstance(k_cache, torch.Tensor) else \
            type(k_cache).__name__
        raise TypeError(f"k_cache must be a 4-D tensor, got {what}")
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, numbers.Integral) \
            or new_tokens < 0:
        raise ValueError(f"new_tokens must be a non-negative int, got {new_tokens!r}")
    if isinstance(cache_seqlens, torch.Tensor) and cache_seqlens.dim() == 1:
        b = cache_seqlens.shape[0]
    elif isinstance(block_table, torch.Tensor) and block_table.dim() == 2:
        b = block_table.shape[0]
    else:
        b = k_cache.shape[0]
    return _plan(k_cache, cache_seqlens, block_table, int(new_tokens), b, "B")


def _check_plan(plan, cache_seqlens, block_table, k_cache, b, new_keys):
    """A plan fits a call: made for caches of this shape and device, this batch, and
    this many new tokens (its values were checked when it was made)."""
    if not isinstance(plan, KVCachePlan):
        raise TypeError(f"plan must be a KVCachePlan (from plan_kvcache), got "
                        f"{type(plan).__name__}")
    if cache_seqlens is not None or block_table is not None:
        raise ValueError("give cache_seqlens and block_table, or a plan made from "
                         "them, not both")
    if (plan.device != k_cache.device or plan.batch != b or plan.new_keys != new_keys
            or _shape(k_cache)[0::2] != (plan.cache_rows, plan.block_size)):
        raise ValueError(
            f"the plan was made for {plan.batch} sequences of {plan.new_keys} new "
            f"tokens, caches of {plan.cache_rows} x {plan.block_size} positions on "
            f"{plan.device}; this call has {b} of {new_keys}, k_cache "
            f"{_shape(k_cache)} on {k_cache.device}")


def _plan(k_cache, cache_seqlens, block_table, new_keys, b, who):
    """The checks of the positions, and their device copies; ``who`` names where the
    batch B comes from in messages."""
    device = k_cache.device
    if cache_seqlens is None:
        raise TypeError("cache_seqlens is required (or a plan)")
    if block_table is not None:
        _integer_tensor(block_table, "block_table")
    if (isinstance(cache_seqlens, numbers.Integral)
            and not isinstance(cache_seqlens, bool)):
        # One length for every sequence; beyond ±2^62 it is out of range either way.
        n = max(-1, min(int(cache_seqlens), 2**62))
        cache_seqlens = torch.full((b,), n, dtype=torch.int64)
    _integer_tensor(cache_seqlens, "cache_seqlens")
    for name, t in (("cache_seqlens", cache_seqlens), ("block_table", block_table)):
        if t is not None and t.device not in (device, torch.device("cpu")):
            raise ValueError(f"all tensors must be on one device: {name} is on "
                             f"{t.device}, k_cache on {device} (or on the CPU, as "
                             "the host's mirror)")
    shapes = f"k_cache {_shape(k_cache)}"
    if block_table is None:
        if k_cache.shape[0] != b:
            raise ValueError("a contiguous cache is [B, Hkv, max_len, D] with "
                             f"{who}={b}: {shapes} (a paged cache needs block_table)")
        block_size = capacity = k_cache.shape[2]
    else:
        if block_table.dim() != 2 or block_table.shape[0] != b:
            raise ValueError(f"block_table must be [B, max_blocks] with {who}={b}, "
                             f"got {_shape(block_table)}")
        block_size = k_cache.shape[2]
        if block_size == 0:
            raise ValueError(f"pages must hold at least one position: {shapes}")
        capacity = block_table.shape[1] * block_size
        if k_cache.shape[0] > INT32_MAX:
            raise ValueError(f"the pool has {k_cache.shape[0]} pages; the kernels "
                             f"index at most {INT32_MAX}")
    if capacity > INT32_MAX - 64:
        raise ValueError(f"a sequence's capacity of {capacity} positions exceeds the "
                         f"kernels' 32-bit limit ({INT32_MAX - 64})")
    if cache_seqlens.shape != (b,):
        raise ValueError(f"cache_seqlens must have shape [B] = [{b}], got "
                         f"{_shape(cache_seqlens)}")

    lengths, table = [], block_table
    if cache_seqlens.device.type != "meta":
        # One read of the lengths: free from a host mirror, a copy back from a GPU.
        lengths = [int(x) for x in cache_seqlens.tolist()]
        for i, n in enumerate(lengths):
            if n < 0:
                raise ValueError(f"cache_seqlens[{i}] = {n} is negative")
            if n + new_keys > capacity:
                what = f" plus {new_keys} new tokens" if new_keys else ""
                raise ValueError(f"cache_seqlens[{i}] = {n}{what} exceeds the cache's "
                                 f"capacity of {capacity} positions")
        if block_table is not None and block_table.device.type != "meta":
            _check_pages(block_table, lengths, new_keys, block_size, k_cache.shape[0])
    if block_table is not None:
        # Entries past a sequence's pages are never read: clamped, they narrow safely.
        table = _to(block_table.clamp(-1, k_cache.shape[0]).to(torch.int32)
                    .contiguous(), device)
    seqlens32 = _to(cache_seqlens.to(torch.int32, copy=True), device)
    return KVCachePlan(seqlens32, table, tuple(lengths), new_keys, capacity,
                       block_size, k_cache.shape[0], device)


def _to(t, device):
    """``t`` (a copy the caller's tensors cannot change) on ``device``: from the host
    to a GPU through pinned memory, without waiting (the copy is queued before the
    kernels that read it)."""
    if t.device == device:
        return t
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _check_pages(block_table, lengths, new_keys, block_size, num_pages):
    """Check every entry of the block table a kernel will use: those that hold a
    sequence's keys, old and new. No page may receive new tokens of two sequences (or
    twice for one): those writes would race. One copy to the host (none from a host
    mirror) and tensor operations, whatever the number of tokens (a prefill appends
    thousands per layer)."""
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
