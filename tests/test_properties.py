"""Property-based tests: Hypothesis draws shapes, strides, masks, dtypes, grouped-head
ratios and NaN/inf placements for ab.attention, its backward and
ab.attention_with_kvcache, and checks each draw against the float64 reference. A
failing draw shrinks to the smallest case, which then stays here as an @example.

CI runs a fixed, derandomized budget of examples (the "ci" profile, conftest.py);
``pytest tests/test_properties.py --hypothesis-profile=long`` runs many more, drawn
afresh."""
import math

import torch
from hypothesis import example, given, note
from hypothesis import strategies as st

import attnbook as ab
from attnbook.ops.decode import DECODE_HEAD_DIMS
from attnbook.ops.flash import FLASH_FP32_HEAD_DIMS
from attnbook.reference.decode import attention_with_kvcache_reference
from test_decode import make_cache

HALF = (torch.float16, torch.bfloat16)
# Output tolerances per dtype, for inputs of magnitude 1 (scores grow with it).
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5),
       torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


def tensor(draw_seed, shape, layout, dtype, magnitude=1.0):
    """Random values of ``shape`` [B, H, S, D], laid out as ``layout`` says:
    "contiguous", "bshd" (heads inside sequence positions, as a model's projection
    gives) or "every other" (every second sequence position of a larger tensor)."""
    g = torch.Generator().manual_seed(draw_seed)
    b, h, s, d = shape
    if layout == "bshd":
        t = torch.randn(b, s, h, d, generator=g).transpose(1, 2)
    elif layout == "every other":
        t = torch.randn(b, h, 2 * s, d, generator=g)[:, :, ::2]
    else:
        t = torch.randn(b, h, s, d, generator=g)
    return (t * magnitude).to(dtype)


@st.composite
def masks(draw, b, h, sq, sk):
    """Mask keywords, of ab.attention and of the reference alike."""
    kind = draw(st.sampled_from(ab.masks.MASK_KINDS))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    opts = {}
    if kind in ("causal", "strided_causal", "window_causal"):
        opts["is_causal"] = True
    if kind.startswith("strided"):
        opts["stride"] = draw(st.integers(1, 5))
    if kind.startswith("window"):
        opts["window"] = draw(st.integers(1, sk + 2))
    if kind == "key_padding":
        lengths = torch.tensor(draw(st.lists(st.integers(0, sk), min_size=b,
                                             max_size=b)))
        opts["key_lengths"] = lengths
    if kind in ("additive", "boolean"):
        # a shape that broadcasts to [B, H, Sq, Sk]
        shape = [draw(st.sampled_from([1, n])) for n in (b, h, sq)] + [sk]
        if kind == "additive":
            m = torch.randn(*shape, generator=g) * draw(st.sampled_from([1.0, 10.0]))
        else:
            m = torch.rand(*shape, generator=g) < draw(st.sampled_from([0.1, 0.5, 0.9]))
        opts["attn_mask"] = m
    note(f"mask {kind}: {opts}")
    return opts


@st.composite
def attention_cases(draw):
    dtype = draw(st.sampled_from([torch.float32, torch.float32, *HALF]))
    impl = "flash" if dtype in HALF else draw(st.sampled_from(ab.ops.IMPLS))
    b, hkv, group = draw(st.integers(1, 2)), draw(st.integers(1, 2)), \
        draw(st.sampled_from([1, 2, 3, 4]))
    sq, sk = draw(st.integers(1, 70)), draw(st.integers(1, 70))
    if dtype in HALF:
        d = draw(st.integers(1, 128))
    elif impl == "flash":
        d = draw(st.sampled_from(FLASH_FP32_HEAD_DIMS))
    else:
        d = draw(st.integers(1, 48))
    layouts = draw(st.lists(st.sampled_from(["contiguous", "bshd", "every other"]),
                            min_size=3, max_size=3))
    magnitude = 1.0 if dtype in HALF else draw(st.sampled_from([1.0, 1.0, 20.0]))
    seed = draw(st.integers(0, 2**16))
    h = hkv * group
    q = tensor(seed, (b, h, sq, d), layouts[0], dtype, magnitude)
    k = tensor(seed + 1, (b, hkv, sk, d), layouts[1], dtype, magnitude)
    v = tensor(seed + 2, (b, hkv, sk, d), layouts[2], dtype)
    ours = draw(masks(b, h, sq, sk))
    ref = dict(ours)
    note(f"{impl} {dtype} B={b} H={h} Hkv={hkv} Sq={sq} Sk={sk} D={d} {layouts} "
         f"magnitude {magnitude} seed {seed}")
    return impl, q, k, v, ours, ref


def tolerance(dtype, magnitude):
    tol = TOL[dtype]
    return dict(rtol=tol["rtol"] * magnitude, atol=tol["atol"] * magnitude)


@given(attention_cases())
def test_attention_matches_the_float64_reference(case):
    impl, q, k, v, ours, ref = case
    out = ab.attention(q, k, v, impl=impl, enable_gqa=True, **ours)
    want = ab.attention_reference(q, k, v, float64=True, **ref)
    assert out.dtype == q.dtype and out.shape == q.shape
    magnitude = max(1.0, q.abs().max().item() * k.abs().max().item() / 8)
    torch.testing.assert_close(out.double(), want, **tolerance(q.dtype, magnitude))


@st.composite
def nonfinite_cases(draw):
    """Inputs of magnitude 1 (no score far below a row's maximum, so nothing rounds to
    0 that float64 keeps) with one NaN, +inf or -inf in q, k or v; masks only where the
    value sits in q (a masked key is absent, by design, where SDPA's 0·NaN is NaN)."""
    impl = draw(st.sampled_from(ab.ops.IMPLS))
    d = draw(st.sampled_from(FLASH_FP32_HEAD_DIMS)) if impl == "flash" else \
        draw(st.integers(1, 40))
    b, hkv, group = draw(st.integers(1, 2)), draw(st.integers(1, 2)), \
        draw(st.integers(1, 3))
    sq, sk = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**16))
    h = hkv * group
    q = tensor(seed, (b, h, sq, d), "contiguous", torch.float32)
    k = tensor(seed + 1, (b, hkv, sk, d), "contiguous", torch.float32)
    v = tensor(seed + 2, (b, hkv, sk, d), "contiguous", torch.float32)
    where = draw(st.sampled_from(["q", "k", "v"]))
    t = dict(q=q, k=k, v=v)[where]
    index = tuple(draw(st.integers(0, n - 1)) for n in t.shape)
    t[index] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    ours = draw(masks(b, h, sq, sk)) if where == "q" else {}
    ref = dict(ours)
    note(f"{impl} B={b} H={h} Hkv={hkv} Sq={sq} Sk={sk} D={d} {t[index]} in {where}"
         f"{list(index)}")
    return impl, q, k, v, ours, ref


def found(impl, where, sq, sk):
    """Draws Hypothesis shrank to, kept: a causal mask, and q's first row starting with
    ``where`` (NaN, -inf), against keys [1, 0, …] and [-1, 0, …]. With Sk = 1 row 0
    admits no key; with Sk = 2 its only key scores -inf and the hidden one +inf, which
    the reference once let through the mask as NaN."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, sq, 32, generator=g)
    v = torch.randn(1, 1, sk, 32, generator=g)
    k = torch.zeros(1, 1, sk, 32)
    k[0, 0, :, 0] = torch.tensor([1.0, -1.0][:sk])
    q[0, 0, 0, 0] = where
    return impl, q, k, v, dict(is_causal=True), dict(is_causal=True)


@example(found("flash", math.nan, 2, 1))
@example(found("tiled", math.nan, 2, 1))
@example(found("flash", -math.inf, 2, 2))
@example(found("naive", -math.inf, 2, 2))
@given(nonfinite_cases())
def test_nan_and_inf_propagate_as_in_the_reference(case):
    impl, q, k, v, ours, ref = case
    out = ab.attention(q, k, v, impl=impl, enable_gqa=True, **ours)
    want = ab.attention_reference(q, k, v, float64=True, **ref)
    assert torch.equal(out.isnan(), want.isnan())
    assert torch.equal(out.isinf() & (out > 0), want.isinf() & (want > 0))
    assert torch.equal(out.isinf() & (out < 0), want.isinf() & (want < 0))
    torch.testing.assert_close(out.double(), want, equal_nan=True, **TOL[torch.float32])


@st.composite
def absent_key_cases(draw):
    """A NaN or inf in the k (or, on the fused float32 kernel, the v) of a key that
    key_lengths masks for every row: the output is as if that value were 0."""
    impl = draw(st.sampled_from(ab.ops.IMPLS))
    d = draw(st.sampled_from(FLASH_FP32_HEAD_DIMS)) if impl == "flash" else \
        draw(st.integers(1, 40))
    b, sq, sk = draw(st.integers(1, 2)), draw(st.integers(1, 30)), \
        draw(st.integers(2, 40))
    seed = draw(st.integers(0, 2**16))
    q, k, v = (tensor(seed + i, (b, 2, n, d), "contiguous", torch.float32)
               for i, n in enumerate((sq, sk, sk)))
    lengths = draw(st.lists(st.integers(0, sk - 1), min_size=b, max_size=b))
    batch = draw(st.integers(0, b - 1))
    key = draw(st.integers(lengths[batch], sk - 1))
    where = draw(st.sampled_from(["k", "v"] if impl == "flash" else ["k"]))
    t = dict(k=k, v=v)[where]
    t[batch, draw(st.integers(0, 1)), key, draw(st.integers(0, d - 1))] = \
        draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    return impl, q, k, v, torch.tensor(lengths)


@given(absent_key_cases())
def test_a_masked_key_is_absent_whatever_it_holds(case):
    impl, q, k, v, lengths = case
    out = ab.attention(q, k, v, impl=impl, key_lengths=lengths, enable_gqa=True)
    want = ab.attention_reference(q, k.nan_to_num(0, 0, 0), v.nan_to_num(0, 0, 0),
                                  key_lengths=lengths, float64=True)
    torch.testing.assert_close(out.double(), want, **TOL[torch.float32])


@st.composite
def backward_cases(draw):
    b, hkv, group = draw(st.integers(1, 2)), draw(st.integers(1, 2)), \
        draw(st.sampled_from([1, 2, 4]))
    sq, sk = draw(st.integers(1, 50)), draw(st.integers(1, 50))
    d = draw(st.sampled_from(FLASH_FP32_HEAD_DIMS))
    layouts = draw(st.lists(st.sampled_from(["contiguous", "bshd", "every other"]),
                            min_size=3, max_size=3))
    seed = draw(st.integers(0, 2**16))
    h = hkv * group
    q, k, v = (tensor(seed + i, shape, layout, torch.float32).requires_grad_()
               for i, (shape, layout) in enumerate(zip(
                   ((b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, d)), layouts)))
    ours = draw(masks(b, h, sq, sk))
    ref = dict(ours)
    if "attn_mask" in ours and ours["attn_mask"].dtype != torch.bool:
        ref["attn_mask"] = ours["attn_mask"].double()
    note(f"B={b} H={h} Hkv={hkv} Sq={sq} Sk={sk} D={d} {layouts} seed {seed}")
    do = tensor(seed + 3, (b, h, sq, d), "contiguous", torch.float32)
    return q, k, v, do, ours, ref


@given(backward_cases())
def test_backward_matches_autograd_of_the_float64_reference(case):
    q, k, v, do, ours, ref = case
    grads = torch.autograd.grad(ab.attention(q, k, v, enable_gqa=True, **ours),
                                (q, k, v), do)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(ab.attention_reference(*leaves, **ref), leaves,
                               do.double())
    for name, got, expected in zip("qkv", grads, want):
        assert got.shape == expected.shape, name
        torch.testing.assert_close(got.double(), expected, rtol=1e-3, atol=1e-4,
                                   msg=lambda m, name=name: f"d{name}: {m}")


@st.composite
def decode_cases(draw):
    dtype = draw(st.sampled_from([torch.float32, *HALF]))
    b, hkv, group = draw(st.integers(1, 3)), draw(st.integers(1, 2)), \
        draw(st.sampled_from([1, 2, 4, 8]))
    sq = draw(st.integers(1, 4))
    d = draw(st.sampled_from(DECODE_HEAD_DIMS))
    block_size = draw(st.sampled_from([None, 1, 5, 16]))
    append, causal = draw(st.booleans()), draw(st.booleans())
    max_len = draw(st.integers(sq if append else 1, 60))
    room = max_len - (sq if append else 0)
    lengths = draw(st.lists(st.integers(0, room), min_size=b, max_size=b))
    splits = draw(st.sampled_from([None, 1, 2, 3, 8, 128]))
    seed = draw(st.integers(0, 2**16))
    note(f"{dtype} B={b} H={hkv * group} Hkv={hkv} Sq={sq} D={d} pages {block_size} "
         f"append {append} causal {causal} max_len {max_len} lengths {lengths} "
         f"splits {splits} seed {seed}")
    return dtype, b, hkv * group, hkv, sq, d, block_size, append, causal, max_len, \
        lengths, splits, seed


@given(decode_cases())
def test_decode_matches_the_float64_reference(case):
    (dtype, b, h, hkv, sq, d, block_size, append, causal, max_len, lengths, splits,
     seed) = case
    k_cache, v_cache, table = make_cache(b, hkv, d, lengths, "cpu", max_len=max_len,
                                         dtype=dtype, block_size=block_size, seed=seed)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, sq, d, generator=g).to(dtype)
    k, v = (torch.randn(b, hkv, sq, d, generator=g).to(dtype)
            for _ in range(2)) if append else (None, None)
    seqlens = torch.tensor(lengths, dtype=torch.int32)
    want, want_lse, want_k, want_v = attention_with_kvcache_reference(
        q, k_cache, v_cache, k, v, cache_seqlens=seqlens, block_table=table,
        is_causal=causal, return_lse=True, return_caches=True)
    o, lse = ab.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens,
                                       block_table=table, num_splits=splits,
                                       is_causal=causal, return_softmax_lse=True)
    torch.testing.assert_close(o.double(), want, **TOL[dtype])
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(k_cache.double(), want_k.double(), rtol=0, atol=0,
                               equal_nan=True)
    torch.testing.assert_close(v_cache.double(), want_v.double(), rtol=0, atol=0,
                               equal_nan=True)
