"""A paged KV cache: a pool of pages with a block table and a free list, which
:func:`attnbook.attention_with_kvcache` reads and writes (chapter 9)."""
from __future__ import annotations

import torch

from ..args.attention import check_positive_int
from ..args.decode import KVCachePlan, plan_kvcache
from .decode import attention_with_kvcache

__all__ = ["PagedKVCache"]


class PagedKVCache:
    """Keys and values of up to ``max_seqs`` sequences in a pool of pages.

    ``k_cache``, ``v_cache``: the pools, [num_blocks, Hkv, block_size, D], filled with
    NaN where nothing was written (a kernel that read such a slot would show it);
    ``block_table``: [max_seqs, max_blocks_per_seq] int32, row b naming sequence b's
    pages in order, kept on the host (the mirror a server keeps: taking a page writes
    no GPU memory, and checking the table reads none back); ``lengths``: the tokens each
    sequence holds. Pages come from a free
    list and return to it when a sequence is freed, so a sequence's pages are neither
    contiguous nor in order once others have come and gone (``generator`` shuffles the
    initial list).

    A decoding step: ``reserve`` pages for the new tokens, call
    :func:`attnbook.attention_with_kvcache` with ``cache_seqlens=cache.seqlens()`` and
    ``block_table=cache.block_table`` (or ``plan=cache.plan(n)``, checked once for
    every layer that shares the table), then ``advance``; :meth:`attend` does all
    three.
    """

    def __init__(self, num_blocks, num_kv_heads, head_dim, *, max_seqs,
                 max_blocks_per_seq, block_size=16, dtype=torch.float32, device="cpu",
                 generator=None):
        num_blocks = check_positive_int(num_blocks, "num_blocks")
        self.block_size = check_positive_int(block_size, "block_size")
        self.max_seqs = check_positive_int(max_seqs, "max_seqs")
        self.max_blocks_per_seq = check_positive_int(max_blocks_per_seq,
                                                     "max_blocks_per_seq")
        shape = (num_blocks, check_positive_int(num_kv_heads, "num_kv_heads"),
                 self.block_size, check_positive_int(head_dim, "head_dim"))
        self.k_cache = torch.full(shape, float("nan"), dtype=dtype, device=device)
        self.v_cache = torch.full(shape, float("nan"), dtype=dtype, device=device)
        self.block_table = torch.zeros(max_seqs, max_blocks_per_seq, dtype=torch.int32)
        self.lengths = [0] * max_seqs
        self.pages = [[] for _ in range(max_seqs)]
        order = range(num_blocks) if generator is None else \
            torch.randperm(num_blocks, generator=generator).tolist()
        self.free_pages = list(reversed(list(order)))   # pop() takes from the end

    @property
    def num_blocks(self) -> int:
        return self.k_cache.shape[0]

    def _check_seq(self, seq):
        if (isinstance(seq, bool) or not isinstance(seq, int)
                or not 0 <= seq < self.max_seqs):
            raise ValueError(f"seq must be an int in [0, {self.max_seqs}), got {seq!r}")

    def reserve(self, seq: int, n: int) -> None:
        """Make room for ``n`` more tokens of sequence ``seq``: take pages from the free
        list until its pages hold lengths[seq] + n positions. Raises MemoryError when
        the pool or the sequence's row of the block table is full (nothing is taken
        then)."""
        self._check_seq(seq)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        need = -(-(self.lengths[seq] + n) // self.block_size) - len(self.pages[seq])
        if len(self.pages[seq]) + need > self.max_blocks_per_seq:
            raise MemoryError(f"sequence {seq} would need "
                              f"{len(self.pages[seq]) + need} pages; its block table "
                              f"row holds {self.max_blocks_per_seq}")
        if need > len(self.free_pages):
            raise MemoryError(f"sequence {seq} needs {need} more pages; "
                              f"{len(self.free_pages)}"
                              " are free")
        for _ in range(max(need, 0)):
            page = self.free_pages.pop()
            self.block_table[seq, len(self.pages[seq])] = page
            self.pages[seq].append(page)

    def advance(self, seq: int, n: int) -> None:
        """Count ``n`` tokens appended to sequence ``seq`` (its pages must hold
        them)."""
        self._check_seq(seq)
        if self.lengths[seq] + n > len(self.pages[seq]) * self.block_size or n < 0:
            raise ValueError(
                f"sequence {seq} has room for "
                f"{len(self.pages[seq]) * self.block_size - self.lengths[seq]} "
                f"more tokens, not {n}: reserve first")
        self.lengths[seq] += n

    def free(self, seq: int) -> None:
        """A finished sequence: its pages go back to the free list, its length to 0."""
        self._check_seq(seq)
        self.free_pages.extend(reversed(self.pages[seq]))
        self.pages[seq] = []
        self.lengths[seq] = 0
        self.block_table[seq] = 0

    def seqlens(self) -> torch.Tensor:
        """The lengths as the int32 [max_seqs] ``cache_seqlens`` of the decode call, on
        the host."""
        return torch.tensor(self.lengths, dtype=torch.int32)

    def plan(self, new_tokens: int = 0) -> KVCachePlan:
        """The checked positions of the next call, which appends ``new_tokens`` per
        sequence (reserve them first): the lengths and the table copied to the pools'
        device once, for every layer (:func:`attnbook.plan_kvcache`)."""
        return plan_kvcache(self.k_cache, self.seqlens(), self.block_table,
                            new_tokens=new_tokens)

    def allocated_positions(self) -> int:
        """Positions reserved in pages (tokens held plus the unused tail of last
        pages)."""
        return sum(len(p) for p in self.pages) * self.block_size

    def attend(self, q, k, v, **kwargs):
        """One step for every sequence: reserve room for k, v's Sn tokens, append them
        and attend (:func:`attnbook.attention_with_kvcache`), then advance the
        lengths."""
        sn = k.shape[2]
        for seq in range(self.max_seqs):
            self.reserve(seq, sn)
        out = attention_with_kvcache(q, self.k_cache, self.v_cache, k, v,
                                     plan=self.plan(sn), **kwargs)
        for seq in range(self.max_seqs):
            self.advance(seq, sn)
        return out
