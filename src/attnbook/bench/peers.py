"""The peer a reader knows best, timed on the chapters' own cases: PyTorch's
FlexAttention (``torch.nn.attention.flex_attention``), compiled, with each chapter's
mask written as a ``mask_mod`` (:func:`attnbook.masks.flex_mask_mod`).

``python -m attnbook.bench peers`` runs the suite ``peers``
(:func:`attnbook.bench.suites.peers`) on a GPU and records it: chapter 5's strided
cases, chapter 7's fp32 cases, chapter 8's fp16 and bf16 cases (those of ``08fa2``)
and chapter 9's decode steps, each row with its chapter's case columns and a
``chapter`` column, so that a chapter's table can set it beside its own rows. It is a
suite of its own, not run by a chapter's benchmark cell: each compiled kernel takes
tens of seconds to build the first time it meets a mask or a shape, which a reader's
quick run (:data:`~attnbook.bench.QUICK`) must not spend. The build happens in a
warm-up call before the timing.
"""
from __future__ import annotations

import warnings

import torch

from . import harness as bench
from ..reference import masks

__all__ = ["flex_call", "flex_row"]


def flex_call(q, k, v, *, is_causal=False, key_lengths=None, compiled=True, **mask):
    """A call of FlexAttention that computes what ``ab.attention(q, k, v,
    is_causal=..., key_lengths=..., **mask)`` computes (causal aligned bottom-right,
    the book's stride and window, grouped heads as they come), its block mask built
    once; compiled by ``torch.compile`` where ``compiled``, from a fresh cache, so that
    no earlier case's compiled kernel is taken or counted against the recompile
    limit. No mask at all: no block mask."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    b, h, sq, _ = q.shape
    sk = k.shape[2]
    block = None
    if is_causal or key_lengths is not None or any(n is not None
                                                   for n in mask.values()):
        rule = masks.flex_mask_mod(sq, sk, is_causal=is_causal,
                                   key_lengths=key_lengths, **mask)
        block = create_block_mask(rule, b if key_lengths is not None else None, None,
                                  sq, sk, device=q.device)
    if compiled:
        torch.compiler.reset()
        fn = torch.compile(flex_attention)
    else:
        fn = flex_attention
    gqa = h != k.shape[1]

    def call():
        with warnings.catch_warnings():   # eager: "unfused implementation", as asked
            warnings.simplefilter("ignore", UserWarning)
            return fn(q, k, v, block_mask=block, enable_gqa=gqa)
    return call


def flex_row(case, work, q, k, v, **rule):
    """The row of FlexAttention at ``case``: built (compiled) and run once, then
    timed; an error at either step is the row's error."""
    if not bench.kept(case):
        return None
    try:
        call = flex_call(q, k, v, **rule)
        call()
    except Exception as e:   # a compiler's error is the row's, not the suite's
        return dict(case, impl="flex", ms=None,
                    error=str(e).splitlines()[0] if str(e) else type(e).__name__)
    return bench.measure("flex", call, case, **work)
