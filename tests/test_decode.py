"""Decoding with a KV cache (chapter 9): the append kernel, the decode kernel, split-K
and its combine, contiguous and paged caches, against the float64 reference under every
thread order; the page allocator; the split heuristic; bad input refused before any
launch."""
import functools
import math
import re

import pytest
import torch

import attnbook as ab
from attnbook.ops.decode import (BLOCKS_PER_SM, DECODE_HEAD_DIMS, EMULATED_SM_COUNT,
                                 choose_num_splits, num_splits_heuristic)
from attnbook.reference.decode import attention_with_kvcache_reference

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 11)]
NAN = float("nan")
# Output tolerances per dtype (the log-sum-exp is float32 for every dtype).
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5),
       torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}
BITS = {torch.float32: torch.int32, torch.float16: torch.int16,
        torch.bfloat16: torch.int16}


def make_cache(B, Hkv, D, lengths, device, *, max_len, dtype=torch.float32,
               block_size=None, spare_pages=3, seed=0):
    """Caches holding random keys and values at the first lengths[b] positions of each
    sequence and NaN everywhere else (a kernel reading a slot it should not would show
    it). Contiguous [B, Hkv, max_len, D], or with ``block_size`` a pool of pages in
    shuffled order with spare pages, and its block table. Returns (k_cache, v_cache,
    block_table), built on the CPU and moved to ``device``."""
    g = torch.Generator().manual_seed(seed)
    table = None
    if block_size is None:
        shape = (B, Hkv, max_len, D)
    else:
        per_seq = -(-max_len // block_size)
        pages = B * per_seq + spare_pages
        table = torch.randperm(pages, generator=g)[:B * per_seq].view(B, per_seq).int()
        shape = (pages, Hkv, block_size, D)
    caches = []
    for _ in range(2):
        cache = torch.full(shape, NAN, dtype=dtype)
        data = torch.randn(B, Hkv, max_len, D, generator=g).to(dtype)
        for b, n in enumerate(lengths):
            for pos in range(n):
                page, slot = (b, pos) if table is None else \
                    (int(table[b, pos // block_size]), pos % block_size)
                cache[page, :, slot] = data[b, :, pos]
        caches.append(cache.to(device))
    return caches[0], caches[1], None if table is None else table.to(device)


def assert_same_bits(a, b):
    assert torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype]))


# (B, H, Hkv, Sq, D, dtype, block_size, append, causal, max_len, lengths, splits):
# lengths before the append. Lengths 0 and 1, page boundaries ± 1 (totals 15, 16, 17,
# 32, 33), the full capacity, grouped heads (G = 1, 2, 4, 8), G·Sq = 64
# (two row groups), block sizes 16, 5 and 1, splits from 1 to 128 (more splits than
# tiles), the heuristic (None).
CASES = {
    "contiguous fp32 Sq=1": (3, 4, 2, 1, 32, torch.float32, None, True, True, 100,
                             [0, 1, 99], [1, 2, 7]),
    "paged fp32 speculative": (3, 4, 1, 4, 32, torch.float32, 16, True, True, 64,
                               [11, 29, 60], [1, 4, None]),
    "paged fp16 two row groups": (2, 8, 1, 8, 64, torch.float16, 16, True, True, 48,
                                  [8, 25], [1, 3]),
    "contiguous bf16 no append": (2, 2, 2, 3, 64, torch.bfloat16, None, False, False,
                                  70, [1, 70], [1, 2]),
    "paged fp32 odd pages, many splits": (2, 4, 2, 2, 128, torch.float32, 5, True, True,
                                          40, [0, 33], [1, 128]),
    "paged fp32 page of one": (2, 2, 1, 1, 32, torch.float32, 1, True, True, 20,
                               [16, 19], [1, 5]),
    "contiguous fp16 head_dim 96": (1, 2, 1, 1, 96, torch.float16, None, True, True, 50,
                                    [49], [None, 2]),
    "contiguous fp32 queries before every key": (2, 2, 1, 3, 32, torch.float32, None,
                                                 False, True, 8, [0, 2], [1, 2]),
    # 32 rows at D = 128: the block's shared memory is 48 KB, CUDA's limit without
    # opt-in.
    "paged bf16 multi-query, 32 heads": (1, 32, 1, 1, 128, torch.bfloat16, 16, True,
                                         True, 40, [33], [1, 2]),
    # The tensor-core step (fp16/bf16, D 64 and 128, Sq = 1 or no causal mask): several
    # tiles per warp (both stages of its ring, 64 keys a round), a partial last tile,
    # pages of 16 and of 5 (a page lookup per key), four query rows per kv head.
    "contiguous fp16 long, tensor cores": (2, 8, 2, 1, 128, torch.float16, None, True,
                                           True, 700, [300, 651], [1, 3, None]),
    "paged bf16 pages of 5, tensor cores": (2, 4, 1, 1, 64, torch.bfloat16, 5, True,
                                            True, 200, [130, 197], [1, 4]),
    "paged fp16 speculative without mask, tensor cores": (1, 8, 2, 4, 64,
                                                          torch.float16, 16, True,
                                                          False, 100, [77], [1, 2]),
}


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o[0])
@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference(case, order, device):
    (B, H, Hkv, Sq, D, dtype, block_size, append, causal, max_len, lengths,
     splits) = CASES[case]
    k_cache, v_cache, table = make_cache(B, Hkv, D, lengths, device, max_len=max_len,
                                         dtype=dtype, block_size=block_size)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, Sq, D, generator=g).to(device, dtype)
    k, v = (torch.randn(B, Hkv, Sq, D, generator=g).to(device, dtype)
            for _ in range(2)) if append else (None, None)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
    want, want_lse, want_k, want_v = attention_with_kvcache_reference(
        q, k_cache, v_cache, k, v, cache_seqlens=seqlens, block_table=table,
        is_causal=causal, return_lse=True, return_caches=True)
    for num_splits in splits:
        kc, vc = k_cache.clone(), v_cache.clone()
        with ab.thread_order(*order):
            o, lse = ab.attention_with_kvcache(
                q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table,
                num_splits=num_splits, is_causal=causal, return_softmax_lse=True)
        assert o.dtype == dtype and o.shape == q.shape and lse.shape == q.shape[:-1]
        torch.testing.assert_close(o.double(), want, **TOL[dtype])
        torch.testing.assert_close(lse.double(), want_lse, rtol=1e-4, atol=1e-4)
        assert_same_bits(kc, want_k)   # the new tokens where they belong, nothing else
        assert_same_bits(vc, want_v)


def test_sequence_without_keys_gives_zeros(device):
    k_cache, v_cache, _ = make_cache(2, 1, 32, [0, 10], device, max_len=16)
    q = torch.randn(2, 2, 1, 32).to(device)
    lens = torch.tensor([0, 10], device=device)
    for splits in (1, 3):
        o, lse = ab.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                           num_splits=splits, return_softmax_lse=True)
        assert (o[0] == 0).all() and (lse[0] == -math.inf).all()
        assert torch.isfinite(o[1]).all() and torch.isfinite(lse[1]).all()


def test_nan_propagates_and_masked_keys_take_no_part(device):
    """A NaN in an attended key makes its rows NaN (as SDPA); an inf in the value of a
    key the causal mask hides from query 0 changes nothing for query 0."""
    k_cache, v_cache, _ = make_cache(2, 1, 32, [6, 6], device, max_len=16)
    k_cache[0, 0, 3, 5] = NAN
    q = torch.randn(2, 1, 2, 32).to(device)
    k, v = torch.randn(2, 1, 2, 32).to(device), torch.randn(2, 1, 2, 32).to(device)
    v_inf = v.clone()
    v_inf[:, :, 1] = math.inf            # the second new token: hidden from query 0
    o = ab.attention_with_kvcache(q, k_cache.clone(), v_cache.clone(), k, v_inf,
                                  cache_seqlens=6, num_splits=2)
    assert o[0].isnan().all()
    finite = ab.attention_with_kvcache(q, k_cache.clone(), v_cache.clone(), k, v,
                                       cache_seqlens=6, num_splits=2)
    torch.testing.assert_close(o[1, :, 0], finite[1, :, 0], rtol=0, atol=0)
    assert not torch.isfinite(o[1, :, 1]).any()


@pytest.mark.parametrize("dtype,d,sq,causal,kernel", [
    (torch.float16, 128, 1, True, "decode_tc_kernel"),
    (torch.bfloat16, 64, 3, False, "decode_tc_kernel"),
    (torch.float16, 64, 3, True, "decode_kernel"),     # rows see different keys
    (torch.float16, 96, 1, True, "decode_kernel"),     # no swizzle for 96
    (torch.float32, 128, 1, True, "decode_kernel")], ids=str)
def test_the_tensor_core_step_runs_where_it_serves(dtype, d, sq, causal, kernel):
    k_cache, v_cache, _ = make_cache(1, 2, d, [40], "cpu", max_len=48, dtype=dtype)
    q = torch.randn(1, 4, sq, d).to(dtype)
    with ab.profile() as report:
        ab.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=40,
                                  is_causal=causal, num_splits=1)
    assert [x.kernel.split("<")[0] for x in report.launches] == [kernel]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_a_nan_query_row_is_nan_on_tensor_cores(dtype, device):
    """A row whose every score is NaN leaves each warp's max at −inf: the merge still
    gives NaN for it (not the zeros of a row without keys), and the other rows are
    untouched."""
    k_cache, v_cache, _ = make_cache(1, 1, 64, [150], device, max_len=160,
                                     dtype=dtype)
    q = torch.randn(1, 4, 1, 64).to(device, dtype)
    q[0, 2, 0, 7] = NAN
    for splits in (1, 2):
        o, lse = ab.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=150,
                                           num_splits=splits, return_softmax_lse=True)
        assert o[0, 2].isnan().all() and lse[0, 2].isnan().all()
        assert o[0, [0, 1, 3]].isfinite().all() and lse[0, [0, 1, 3]].isfinite().all()


def test_splits_agree_with_one_split(device):
    k_cache, v_cache, table = make_cache(2, 2, 64, [90, 45], device, max_len=96,
                                         block_size=16)
    q = torch.randn(2, 4, 1, 64).to(device)
    lens = torch.tensor([90, 45], device=device)
    one = ab.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                    block_table=table, num_splits=1)
    for splits in (2, 3, 4, 16):
        torch.testing.assert_close(ab.attention_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=lens, block_table=table,
            num_splits=splits),
            one, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "one element off"])
def test_the_cache_is_read_16_bytes_at_a_time_where_aligned(dtype, offset):
    """An aligned cache is read in 16-byte loads (512 bytes a warp-wide request); a
    cache viewed one element past a 16-byte boundary, where such a load would fault on
    a GPU, an element at a time: the same answer either way."""
    k_cache, v_cache, _ = make_cache(2, 2, 64, [33, 40], "cpu", max_len=40,
                                     dtype=dtype)

    def shifted(x):
        view = torch.empty(x.numel() + offset, dtype=dtype)[offset:].view(x.shape)
        return view.copy_(x)

    kc, vc = shifted(k_cache), shifted(v_cache)
    q = torch.randn(2, 4, 1, 64, generator=torch.Generator().manual_seed(4)).to(dtype)
    lens = torch.tensor([33, 40], dtype=torch.int32)
    want = attention_with_kvcache_reference(q, k_cache, v_cache, cache_seqlens=lens)
    with ab.profile() as report:
        o = ab.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, num_splits=1)
    torch.testing.assert_close(o.double(), want, **TOL[dtype])
    (launch,) = [x for x in report.launches if x.kernel.startswith("decode")]
    loads = [r for r in launch.rows if (r.space, r.op) == ("global", "load")]
    cache = max(loads, key=lambda r: r.bytes)   # the line that reads the cache
    assert cache.bytes >= 0.9 * sum(r.bytes for r in loads)
    width = cache.bytes / cache.requests / 32   # bytes per lane (some lanes idle)
    assert width > 14 if offset == 0 else width <= dtype.itemsize


def test_int64_lengths_and_block_table_and_int_seqlens(device):
    k_cache, v_cache, table = make_cache(2, 1, 32, [7, 7], device, max_len=32,
                                         block_size=16)
    q = torch.randn(2, 2, 1, 32).to(device)
    want = attention_with_kvcache_reference(q, k_cache, v_cache, cache_seqlens=7,
                                            block_table=table)
    for lens in (7, torch.tensor([7, 7], dtype=torch.int64, device=device)):
        o = ab.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                      block_table=table.long())
        torch.testing.assert_close(o.double(), want, rtol=1e-4, atol=1e-5)


def test_strided_views_and_scale(device):
    """A [B, S, H, D] buffer viewed as [B, H, S, D] works as q, as new keys, and as a
    cache written in place."""
    g = torch.Generator().manual_seed(3)
    kc_bshd = torch.randn(2, 40, 2, 32, generator=g).to(device)
    vc_bshd = torch.randn(2, 40, 2, 32, generator=g).to(device)
    kc, vc = kc_bshd.transpose(1, 2), vc_bshd.transpose(1, 2)
    # [2, 4, 3, 32], strided
    q = torch.randn(2, 3, 4, 32, generator=g).to(device).transpose(1, 2)
    k = torch.randn(2, 3, 2, 32, generator=g).to(device).transpose(1, 2)
    v = torch.randn(2, 3, 2, 32, generator=g).to(device).transpose(1, 2)
    lens = torch.tensor([4, 30], device=device)
    want, want_k, _ = attention_with_kvcache_reference(
        q, kc, vc, k, v, cache_seqlens=lens, scale=0.3, return_caches=True)
    o = ab.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, scale=0.3)
    torch.testing.assert_close(o.double(), want, rtol=1e-4, atol=1e-5)
    assert torch.equal(kc_bshd.transpose(1, 2), want_k)


def test_append_alone(device):
    k_cache, v_cache, table = make_cache(2, 2, 32, [3, 17], device, max_len=32,
                                         block_size=16, dtype=torch.bfloat16)
    k = torch.randn(2, 2, 3, 32).to(device, torch.bfloat16)
    v = torch.randn(2, 2, 3, 32).to(device, torch.bfloat16)
    lens = torch.tensor([3, 17], device=device)
    _, want_k, want_v = attention_with_kvcache_reference(
        k, k_cache, v_cache, k, v, cache_seqlens=lens, block_table=table,
        return_caches=True)
    ab.kv_cache_append(k_cache, v_cache, k, v, cache_seqlens=lens, block_table=table)
    assert_same_bits(k_cache, want_k)
    assert_same_bits(v_cache, want_v)


# ---- positions checked once: host mirrors and plans ---------------------------------
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_a_plan_and_a_host_mirror_give_what_the_arguments_give(paged, device):
    """The lengths and the table checked once (plan_kvcache) or given on the host
    compute what the device tensors compute, append and attention alike."""
    k_cache, v_cache, table = make_cache(2, 2, 32, [5, 11], device, max_len=32,
                                         block_size=8 if paged else None)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 4, 3, 32, generator=g).to(device)
    k, v = (torch.randn(2, 2, 3, 32, generator=g).to(device) for _ in range(2))
    lens = torch.tensor([5, 11], device=device)
    caches = [(k_cache.clone(), v_cache.clone()) for _ in range(3)]
    want = attention_with_kvcache_reference(q, k_cache, v_cache, k, v,
                                            cache_seqlens=lens, block_table=table)
    host = dict(cache_seqlens=lens.cpu(),
                block_table=None if table is None else table.cpu())
    plan = ab.plan_kvcache(k_cache, **host, new_tokens=3)
    assert plan.cache_seqlens.device == k_cache.device and plan.lengths == (5, 11)
    calls = [dict(cache_seqlens=lens, block_table=table), host, dict(plan=plan)]
    outs = [ab.attention_with_kvcache(q, kc, vc, k, v, **kw)
            for (kc, vc), kw in zip(caches, calls)]
    for o, (kc, vc) in zip(outs, caches):
        torch.testing.assert_close(o.double(), want, rtol=1e-4, atol=1e-5)
        assert_same_bits(kc, caches[0][0])
        assert_same_bits(vc, caches[0][1])
    appended = k_cache.clone(), v_cache.clone()
    ab.kv_cache_append(*appended, k, v, plan=plan)
    assert_same_bits(appended[0], caches[0][0])
    assert_same_bits(appended[1], caches[0][1])


def test_a_plan_fits_only_the_calls_it_was_made_for():
    kc = torch.zeros(2, 2, 16, 32)
    q, k = torch.zeros(2, 4, 2, 32), torch.zeros(2, 2, 2, 32)
    plan = ab.plan_kvcache(kc, torch.tensor([0, 3]), new_tokens=2)
    pool = torch.zeros(6, 2, 4, 32)
    paged = ab.plan_kvcache(pool, torch.tensor([0, 3]), torch.tensor(
        [[0, 1, 2, 3], [4, 5, 0, 1]]), new_tokens=2)
    bad = [
        (dict(k_cache=kc, plan=plan, k=None), "made for 2 sequences of 2 new tokens"),
        (dict(k_cache=torch.zeros(2, 2, 8, 32), plan=plan), "caches of 2 x 16"),
        (dict(k_cache=kc, plan=plan, q=q[:1], k=k[:1]), "this call has 1 of 2"),
        (dict(k_cache=pool, plan=plan), "k_cache (6, 2, 4, 32)"),
        (dict(k_cache=torch.zeros(7, 2, 4, 32), plan=paged), "caches of 6 x 4"),
        (dict(k_cache=kc, plan=plan, cache_seqlens=3), "not both"),
        (dict(k_cache=kc, plan=plan.cache_seqlens), "plan must be a KVCachePlan"),
        (dict(k_cache=kc.to("meta"), plan=plan, q=q.to("meta"), k=k.to("meta")),
         "on cpu; this call"),
    ]
    for kw, message in bad:
        kw = dict(dict(q=q, k=k), **kw)
        kw.setdefault("v", kw["k"])
        kw["v_cache"] = kw["k_cache"].clone()
        with pytest.raises((ValueError, TypeError), match=re.escape(message)):
            ab.attention_with_kvcache(**kw)
    assert torch.equal(kc, torch.zeros_like(kc))   # nothing written
    with pytest.raises(ValueError, match="outside the pool of 6 pages"):
        ab.plan_kvcache(pool, torch.tensor([0, 3]), torch.tensor(
            [[0, 1, 2, 3], [4, 6, 0, 1]]), new_tokens=2)
    with pytest.raises(ValueError, match="new_tokens must be"):
        ab.plan_kvcache(kc, torch.tensor([0, 3]), new_tokens=-1)
    with pytest.raises(TypeError, match="cache_seqlens is required"):
        ab.attention_with_kvcache(q, kc, kc.clone())


def test_a_host_mirror_is_checked_without_the_device():
    """Lengths and a table on the host beside caches on the meta device (which holds
    no values: any read back from it raises) are checked all the same."""
    pool = torch.empty(6, 2, 4, 32, device="meta")
    q = torch.empty(2, 4, 1, 32, device="meta")
    table = torch.tensor([[0, 1, 2, 3], [4, 5, 0, 1]], dtype=torch.int32)
    o = ab.attention_with_kvcache(q, pool, torch.empty_like(pool),
                                  cache_seqlens=torch.tensor([3, 9]), block_table=table)
    assert o.device.type == "meta"
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\] = 17 .* capacity of 16"):
        ab.attention_with_kvcache(q, pool, torch.empty_like(pool),
                                  cache_seqlens=torch.tensor([3, 17]),
                                  block_table=table)
    table[1, 2] = 6
    with pytest.raises(ValueError, match=r"block_table\[1, 2\] = 6 is outside"):
        ab.plan_kvcache(pool, torch.tensor([3, 9]), table)
    with pytest.raises(ValueError, match="or on the CPU, as the host's mirror"):
        ab.plan_kvcache(torch.zeros(2, 2, 8, 32), torch.zeros(2, dtype=torch.int32,
                                                               device="meta"))


# ---- the page allocator --------------------------------------------------------------
def test_paged_cache_decodes_like_the_reference_as_sequences_come_and_go(device):
    """Prefill, decode steps, a sequence freed and a new one started in its slot: pages
    return to the free list and are reused out of order; every step matches the
    reference on the pages as they are."""
    g = torch.Generator().manual_seed(5)
    cache = ab.PagedKVCache(12, 2, 32, max_seqs=2, max_blocks_per_seq=5, block_size=4,
                            device=device, generator=torch.Generator().manual_seed(0))
    steps = [5, 1, 1, "free 1", 3, 1, 1]
    for step in steps:
        if step == "free 1":
            before = len(cache.free_pages)
            cache.free(1)
            assert len(cache.free_pages) > before and cache.lengths[1] == 0
            continue
        q = torch.randn(2, 4, step, 32, generator=g).to(device)
        k, v = (torch.randn(2, 2, step, 32, generator=g).to(device),
                torch.randn(2, 2, step, 32, generator=g).to(device))
        for seq in range(2):
            cache.reserve(seq, step)
        want = attention_with_kvcache_reference(
            q, cache.k_cache, cache.v_cache, k, v, cache_seqlens=cache.seqlens(),
            block_table=cache.block_table)
        lengths = list(cache.lengths)
        o = cache.attend(q, k, v, num_splits=2)
        torch.testing.assert_close(o.double(), want, rtol=1e-4, atol=1e-5)
        assert cache.lengths == [n + step for n in lengths]
    assert cache.lengths == [12, 5]
    assert (sorted(cache.pages[0]) != cache.pages[0]
            or cache.pages[1] != sorted(cache.pages[1]))
    used = cache.pages[0] + cache.pages[1]
    assert len(set(used)) == len(used) == 3 + 2   # 12 and 5 tokens in pages of 4
    assert len(cache.free_pages) == 12 - len(used)
    assert cache.allocated_positions() == 4 * len(used)


def test_allocator_runs_out_cleanly(device):
    cache = ab.PagedKVCache(3, 1, 32, max_seqs=2, max_blocks_per_seq=2, block_size=4,
                            device=device)
    cache.reserve(0, 8)
    with pytest.raises(MemoryError, match="1 are free"):
        cache.reserve(1, 5)
    with pytest.raises(MemoryError, match="holds 2"):
        cache.reserve(0, 9)
    assert len(cache.free_pages) == 1 and cache.pages[1] == []
    with pytest.raises(ValueError, match="reserve first"):
        cache.advance(1, 1)
    with pytest.raises(ValueError, match="seq must be"):
        cache.free(2)


# ---- the split heuristic -------------------------------------------------------------
def test_split_heuristic():
    assert num_splits_heuristic(blocks=108, key_chunks=64, num_sms=108) == 1   # full
    assert num_splits_heuristic(blocks=87, key_chunks=64, num_sms=108) == 1    # ≥ 80%
    assert num_splits_heuristic(blocks=8, key_chunks=1, num_sms=108) == 1    # one chunk
    s = num_splits_heuristic(blocks=8, key_chunks=64, num_sms=108)
    assert 8 <= s <= 64 and 8 * s / 108 <= math.ceil(8 * s / 108)
    assert num_splits_heuristic(blocks=1, key_chunks=1000, num_sms=132) <= 128
    # B = 1, 8 kv heads, 32k keys on the emulator's 108 SMs: split; B = 64: not.
    assert choose_num_splits(1, 8, 1, 32768, "cpu") > 1
    assert choose_num_splits(64, 8, 1, 32768, "cpu") == 1
    assert EMULATED_SM_COUNT == 108


def test_the_heuristic_plans_two_blocks_per_sm():
    """As FlashAttention does for 128-thread blocks: 128 blocks (B = 16, 8 kv heads)
    fill one block per SM of 108 but not two, so they split (the H200 read 230 GB/s
    with 128 blocks, 425 with 512)."""
    assert BLOCKS_PER_SM == 2
    assert num_splits_heuristic(blocks=128, key_chunks=256, num_sms=108) == 1
    assert choose_num_splits(16, 8, 4, 32768, "cpu") == num_splits_heuristic(
        blocks=128, key_chunks=256, num_sms=2 * 108) == 3


# ---- registered ops: meta and fake tensors -------------------------------------------
def test_meta_and_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode
    q = torch.empty(2, 4, 1, 64, device="meta")
    kc = torch.empty(2, 2, 50, 64, device="meta")
    o = ab.attention_with_kvcache(q, kc, torch.empty_like(kc),
                                  cache_seqlens=torch.zeros(2, dtype=torch.int32,
                                                            device="meta"),
                                  num_splits=2)
    assert o.shape == q.shape and o.device.type == "meta"
    with FakeTensorMode():
        q = torch.empty(2, 4, 1, 64, dtype=torch.float16)
        kc = torch.empty(9, 2, 16, 64, dtype=torch.float16)
        o, lse = torch.ops.attnbook.decode_attention(
            q, kc, kc, torch.zeros(2, dtype=torch.int32),
            torch.zeros(2, 3, dtype=torch.int32), 0, 4, True, 0.125)
        assert (o.shape == q.shape and o.dtype == torch.float16
                and lse.dtype == torch.float32)
    for name in ("kv_cache_append", "decode_attention"):
        assert hasattr(torch.ops.attnbook, name)


def test_empty_shapes(device):
    kc = torch.zeros(2, 2, 8, 32, device=device)
    for q, lens in ((torch.zeros(2, 4, 0, 32, device=device), [1, 2]),
                    (torch.zeros(0, 4, 1, 32, device=device), [])):
        b = q.shape[0]
        seqlens = torch.tensor(lens, dtype=torch.int32, device=device)
        o = ab.attention_with_kvcache(q, kc[:b], kc[:b].clone(), cache_seqlens=seqlens)
        assert o.shape == q.shape


def test_registered_ops_under_torch_compile(device):
    """The append declares that it mutates the caches: compiled with fullgraph, the two
    ops give the same output and the same caches as eager."""
    from attnbook.ops.decode import decode_attention
    from attnbook.ops.kv_cache import kv_cache_append_op

    def step(q, kc, vc, k, v, lens):
        kv_cache_append_op(kc, vc, k, v, lens, None)
        return decode_attention(q, kc, vc, lens, None, k.shape[2], 2, True,
                                0.125)[0] * 2

    g = torch.Generator().manual_seed(4)
    q, kc, vc, k, v = (torch.randn(*s, generator=g).to(device) for s in (
        (2, 4, 1, 64), (2, 2, 20, 64), (2, 2, 20, 64), (2, 2, 1, 64), (2, 2, 1, 64)))
    lens = torch.tensor([3, 9], dtype=torch.int32, device=device)
    eager_k, eager_v = kc.clone(), vc.clone()
    want = step(q, eager_k, eager_v, k, v, lens)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    got = compiled(q, kc, vc, k, v, lens)
    assert (torch.equal(got, want) and torch.equal(kc, eager_k)
            and torch.equal(vc, eager_v))


# ---- bad input: a clear error before any launch, the cache untouched -----------------
def _bad_cases(device):
    """(name, keywords, error, message) of each bad request, its tensors on
    ``device``."""
    tensor = functools.partial(torch.tensor, device=device)
    zeros = functools.partial(torch.zeros, device=device)
    kc = zeros(2, 2, 16, 32)
    pool = zeros(6, 2, 4, 32)
    table = tensor([[0, 1, 2, 3], [4, 5, 0, 1]], dtype=torch.int32)
    q, k = zeros(2, 4, 2, 32), zeros(2, 2, 2, 32)
    ok = dict(q=q, k_cache=kc, v_cache=kc.clone(), k=k, v=k.clone(),
              cache_seqlens=tensor([0, 3]))
    paged = dict(ok, k_cache=pool, v_cache=pool.clone(), block_table=table)

    def with_(base=ok, **kw):
        return {**base, **kw}

    yield "past max_len", with_(cache_seqlens=tensor([0, 15])), ValueError, \
        r"cache_seqlens\[1\] = 15 plus 2 new tokens exceeds the cache's capacity of 16"
    yield "negative length", with_(cache_seqlens=tensor([0, -1])), ValueError, \
        r"cache_seqlens\[1\] = -1 is negative"
    yield "huge int64 length", with_(cache_seqlens=tensor([2**40, 0])), \
        ValueError, "exceeds the cache's capacity"
    yield "huge int length", with_(cache_seqlens=2**70), ValueError, "exceeds the cache"
    yield "float lengths", with_(cache_seqlens=tensor([0.0, 3.0])), TypeError, \
        "cache_seqlens must be an int32 or int64 tensor"
    yield "lengths shape", with_(cache_seqlens=tensor([0, 3, 4])), ValueError, \
        r"cache_seqlens must have shape \[B\] = \[2\]"
    yield "page outside pool", with_(paged, block_table=tensor(
        [[0, 1, 2, 3], [4, 6, 0, 1]], dtype=torch.int32)), ValueError, \
        r"block_table\[1, 1\] = 6 is outside the pool of 6 pages"
    yield "negative page", with_(paged, block_table=tensor(
        [[-1, 1, 2, 3], [4, 5, 0, 1]], dtype=torch.int32)), ValueError, \
        "outside the pool"
    yield "huge int64 page", with_(paged, block_table=tensor(
        [[2**33, 1, 2, 3], [4, 5, 0, 1]])), ValueError, "outside the pool"
    yield "page shared by two writers", with_(paged, block_table=tensor(
        [[0, 1, 2, 3], [0, 5, 3, 1]], dtype=torch.int32), cache_seqlens=tensor(
            [0, 0])), ValueError, "must not be shared"
    yield "paged past capacity", with_(paged, cache_seqlens=tensor([15, 0])), \
        ValueError, "capacity of 16"
    yield "float block table", with_(paged, block_table=table.float()), TypeError, \
        "block_table must be an int32 or int64 tensor"
    yield "block table rows", with_(paged, block_table=table[:1]), ValueError, \
        r"block_table must be \[B, max_blocks\]"
    yield "cache dtype", with_(k_cache=kc.double(), v_cache=kc.double()), TypeError, \
        "k_cache must be float32 or float16 or bfloat16, got torch.float64"
    yield "cache dtype differs from q", with_(k_cache=kc.half(), v_cache=kc.half()), \
        TypeError, "k_cache must have q's dtype torch.float32, got torch.float16"
    yield "cache batch", with_(k_cache=kc[:1], v_cache=kc[:1].clone()), ValueError, \
        "a contiguous cache is"
    yield "cache shapes differ", with_(v_cache=kc[:, :, :8]), ValueError, \
        "k_cache and v_cache must have one shape"
    yield "cache head_dim", with_(k_cache=kc[..., :16], v_cache=kc[..., :16].clone()), \
        ValueError, "head_dim must be q's D=32"
    yield "cache 3-D", with_(k_cache=kc[0], v_cache=kc[0].clone()), ValueError, \
        "k_cache must be 4-D"
    yield "cache device", with_(k_cache=kc.to("meta"), v_cache=kc.to("meta")), \
        ValueError, "all tensors must be on one device"
    yield "cache head dim strided", \
        with_(k_cache=zeros(2, 2, 16, 64)[..., ::2],
              v_cache=zeros(2, 2, 16, 64)[..., ::2]), \
        ValueError, "head dimension must be contiguous"
    yield "same cache twice", with_(v_cache=kc), ValueError, "different tensors"
    yield "heads", with_(q=zeros(2, 3, 2, 32)), ValueError, "multiple of"
    yield "k without v", with_(v=None), ValueError, "k and v must be given together"
    yield "k length", with_(k=zeros(2, 2, 3, 32), v=zeros(2, 2, 3, 32)), \
        ValueError, r"k must be \[B, Hkv, Sq, D\]"
    yield "k dtype", with_(k=k.half(), v=k.half()), TypeError, "k must have q's dtype"
    yield "q 3-D", with_(q=q[0]), ValueError, r"q must be \[B, H, Sq, D\]"
    yield "q not a tensor", with_(q=[1.0]), TypeError, "q must be a tensor"
    yield "q int", with_(q=q.int()), TypeError, "q must be float32"
    yield "head_dim 40", with_(q=zeros(2, 4, 2, 40),
                               k_cache=zeros(2, 2, 16, 40),
                               v_cache=zeros(2, 2, 16, 40),
                               k=zeros(2, 2, 2, 40),
                               v=zeros(2, 2, 2, 40)), ValueError, \
        "head_dim 40 is not supported by the decode kernel"
    yield "num_splits 0", with_(num_splits=0), ValueError, \
        "num_splits must be a positive"
    yield "num_splits 129", with_(num_splits=129), ValueError, "at most 128"
    yield "num_splits bool", with_(num_splits=True), ValueError, "num_splits"
    yield "causal", with_(is_causal=1), TypeError, "causal must be a bool"
    yield "scale", with_(scale="x"), TypeError, "scale must be a number"
    yield "scale 1e300", with_(scale=1e300), ValueError, "not a finite float32"


BAD = [case[0] for case in _bad_cases("cpu")]   # the names; each test builds its own


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_refused_before_any_write(name, device):
    kwargs, error, match = {case[0]: case[1:] for case in _bad_cases(device)}[name]
    caches = [kwargs[n] for n in ("k_cache", "v_cache")
              if isinstance(kwargs.get(n), torch.Tensor)]
    before = [c.clone() for c in caches if c.device.type != "meta"]
    with pytest.raises(error, match=match):
        ab.attention_with_kvcache(**kwargs)
    for c, b in zip([c for c in caches if c.device.type != "meta"], before):
        assert torch.equal(c, b)


def test_head_dims_are_the_compiled_ones():
    assert DECODE_HEAD_DIMS == (32, 64, 96, 128)


def _pages_by_loop(table, lengths, new_keys, block_size, num_pages):
    """What the block-table check must find, token by token: the first page out of
    the pool, else the first (page, slot) a second new token would be written to."""
    for b, n in enumerate(lengths):
        for j in range(-(-(n + new_keys) // block_size)):
            if not 0 <= table[b][j] < num_pages:
                return "outside the pool"
    written = {}
    for b, n in enumerate(lengths):
        for pos in range(n, n + new_keys):
            key = (table[b][pos // block_size], pos % block_size)
            if key in written:
                return (f"page {key[0]} slot {key[1]} would receive two new tokens "
                        f"(sequences {written[key]} and {b})")
            written[key] = b
    return None


def test_the_block_table_check_finds_what_a_loop_over_tokens_finds():
    """The paged cache's check runs as tensor operations (a prefill appends thousands
    of tokens per layer; a Python loop per token took 25 ms a layer): the same errors
    as a loop over every token, on random tables, pools and lengths."""
    from attnbook.args.decode import _check_pages
    g = torch.Generator().manual_seed(0)
    for _ in range(400):
        b, pages, pool = (int(torch.randint(1, hi, (), generator=g))
                          for hi in (5, 7, 13))
        block_size = (1, 2, 4, 16)[int(torch.randint(4, (), generator=g))]
        low = -1 if torch.rand((), generator=g) < 0.3 else 0
        table = torch.randint(low, pool + (low < 0), (b, pages), generator=g)
        new_keys = int(torch.randint(pages * block_size + 1, (), generator=g))
        lengths = [int(torch.randint(pages * block_size - new_keys + 1, (),
                                     generator=g)) for _ in range(b)]
        want = _pages_by_loop(table.tolist(), lengths, new_keys, block_size, pool)
        if want is None:
            _check_pages(table, lengths, new_keys, block_size, pool)   # no error
        else:
            with pytest.raises(ValueError, match=re.escape(want)):
                _check_pages(table, lengths, new_keys, block_size, pool)
