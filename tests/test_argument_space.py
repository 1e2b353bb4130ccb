"""Property-based tests of the public API's whole argument space, wrong arguments
included: Hypothesis draws a valid call of ab.attention or ab.attention_with_kvcache
and replaces one argument by a drawn value of any kind (tensors of any shape, dtype and
values, numbers out of range, NaN, huge integers, strings, None). Each call either
matches the float64 reference or raises TypeError, ValueError or NotImplementedError
whose message names the argument, never another exception, and a refused decode call
leaves the caches as they were. CI runs the "ci" profile's fixed budget (conftest.py).
"""
import torch
from hypothesis import event, given, note
from hypothesis import strategies as st

import attnbook as ab
from attnbook.ops.flash import FLASH_FP32_HEAD_DIMS
from attnbook.reference.decode import attention_with_kvcache_reference
from test_decode import make_cache

CLEAR = (TypeError, ValueError, NotImplementedError)
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
          torch.int64, torch.uint8, torch.bool, torch.complex64]
HUGE = 2**70


@st.composite
def tensors(draw, near=None, dtypes=DTYPES, low=-3, high=3):
    """A tensor of any dtype and values in [low, high), of a random shape or, given
    ``near``, a shape that differs from it in at most one place."""
    if near is not None and draw(st.booleans()):
        shape = list(near)
        if shape and draw(st.booleans()):
            i = draw(st.integers(0, len(shape) - 1))
            shape[i] = draw(st.integers(0, shape[i] + 2))
        elif draw(st.booleans()):
            shape.insert(0, draw(st.integers(0, 2)))
        elif shape:
            shape.pop(0)
    else:
        shape = draw(st.lists(st.integers(0, 4), max_size=5))
    dtype = draw(st.sampled_from(dtypes))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    t = torch.randint(low, high, shape, generator=g) if dtype in (
        torch.int32, torch.int64) else torch.randn(shape, generator=g) * (high - low)
    return t.to(dtype)


def numbers():
    return st.one_of(st.integers(-HUGE, HUGE), st.none(), st.booleans(),
                     st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=2), st.complex_numbers(max_magnitude=4),
                     st.lists(st.integers(-3, 3), max_size=3))


def refused_clearly(error, name):
    """A clear error names the argument (head_dim for a tensor's last size, the
    shapes for a tensor whose shape does not match another's)."""
    text = str(error)
    return (name in text or "head_dim" in text or "dtype" in text
            or name in ("q", "k", "v") and "shape" in text)


def call(fn, *args, **kwargs):
    """(result, None) or (None, the clear error); any other exception fails."""
    try:
        result = fn(*args, **kwargs), None
    except CLEAR as e:
        event(f"refused: {type(e).__name__}")
        return None, e
    event("computed")
    return result


@st.composite
def attention_calls(draw):
    impl = draw(st.sampled_from(ab.ops.IMPLS))
    b, hkv, group = (draw(st.integers(1, 2)) for _ in range(3))
    sq, sk = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    d = draw(st.sampled_from(FLASH_FP32_HEAD_DIMS[:1] if impl == "flash" else
                             [1, 7, 32]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    h = hkv * group
    args = dict(q=torch.randn(b, h, sq, d, generator=g),
                k=torch.randn(b, hkv, sk, d, generator=g),
                v=torch.randn(b, hkv, sk, d, generator=g))
    kwargs = dict(impl=impl, is_causal=draw(st.booleans()), enable_gqa=True)
    name = draw(st.sampled_from(["attn_mask", "key_lengths", "stride", "window",
                                 "scale", "q", "k", "v", "is_causal", "dropout_p",
                                 "enable_gqa", "impl"]))
    shapes = dict(q=(b, h, sq, d), k=(b, hkv, sk, d), v=(b, hkv, sk, d),
                  attn_mask=(b, h, sq, sk), key_lengths=(b,))
    # half the draws are of the kind the argument takes, often valid
    plausible = dict(
        **{n: tensors(shapes[n], [torch.float32]) for n in ("q", "k", "v")},
        attn_mask=st.one_of(st.none(), tensors(shapes["attn_mask"],
                                               [torch.bool, torch.float32])),
        key_lengths=st.one_of(st.none(), tensors((b,), [torch.int32, torch.int64],
                                                 -2**40, 2**40)),
        is_causal=st.booleans(), enable_gqa=st.booleans(),
        scale=st.one_of(st.none(), st.floats(-10, 10)),
        stride=st.one_of(st.none(), st.integers(1, HUGE)),
        window=st.one_of(st.none(), st.integers(1, HUGE)),
        dropout_p=st.sampled_from([0, 0.0]), impl=st.sampled_from(ab.ops.IMPLS))
    value = draw(plausible[name] if draw(st.booleans()) else
                 st.one_of(numbers(), tensors(shapes.get(name))))
    (args if name in args else kwargs)[name] = value
    note(f"{impl} B={b} H={h} Hkv={hkv} Sq={sq} Sk={sk} D={d}: {name} = {value!r}")
    return args, kwargs, name


@given(attention_calls())
def test_attention_matches_the_reference_or_refuses_clearly(case):
    args, kwargs, name = case
    out, error = call(ab.attention, **args, **kwargs)
    if error is not None:
        assert refused_clearly(error, name), error
        return
    ref = {n: kwargs[n] for n in ("scale", "is_causal", "attn_mask", "key_lengths",
                                  "stride", "window") if n in kwargs}
    want = ab.attention_reference(**args, float64=True, **ref)
    assert out.shape == args["q"].shape and out.dtype == args["q"].dtype
    scale = kwargs.get("scale")
    if scale is None or abs(scale) <= 1e3:   # larger ones overflow float32 scores
        torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)


def bits(t):
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16).clone()


@st.composite
def decode_calls(draw):
    b, hkv, group = draw(st.integers(1, 3)), draw(st.integers(1, 2)), \
        draw(st.sampled_from([1, 2]))
    sq, d = draw(st.integers(1, 3)), 32
    block_size = draw(st.sampled_from([None, 1, 4]))
    append = draw(st.booleans())
    max_len = draw(st.integers(sq, 12))
    lengths = draw(st.lists(st.integers(0, max_len - sq), min_size=b, max_size=b))
    seed = draw(st.integers(0, 2**16))
    k_cache, v_cache, table = make_cache(b, hkv, d, lengths, "cpu", max_len=max_len,
                                         block_size=block_size, seed=seed)
    g = torch.Generator().manual_seed(seed)
    h = hkv * group
    args = dict(q=torch.randn(b, h, sq, d, generator=g), k_cache=k_cache,
                v_cache=v_cache, k=None, v=None)
    if append:
        args["k"], args["v"] = (torch.randn(b, hkv, sq, d, generator=g)
                                for _ in range(2))
    kwargs = dict(cache_seqlens=torch.tensor(lengths, dtype=torch.int32),
                  block_table=table, is_causal=draw(st.booleans()))
    name = draw(st.sampled_from(["cache_seqlens", "block_table", "num_splits", "k",
                                 "v", "q", "k_cache", "is_causal", "scale"]))
    pages = k_cache.shape[0]
    near = dict(q=args["q"].shape, k=(b, hkv, sq, d), v=(b, hkv, sq, d),
                k_cache=k_cache.shape, cache_seqlens=(b,),
                block_table=table.shape if table is not None else (b, 3))
    # half the draws are of the kind the argument takes, often valid
    plausible = dict(
        block_table=st.one_of(st.none(), tensors(near["block_table"],
                                                 [torch.int32, torch.int64], -2,
                                                 pages + 2)),
        cache_seqlens=st.one_of(st.integers(-1, max_len + 1), tensors(
            (b,), [torch.int32, torch.int64], -1, max_len + 2)),
        num_splits=st.one_of(st.none(), st.integers(1, 130)),
        is_causal=st.booleans(), scale=st.one_of(st.none(), st.floats(-10, 10)),
        **{n: tensors(near[n], [torch.float32]) for n in ("q", "k", "v", "k_cache")})
    value = draw(plausible[name] if draw(st.booleans()) else
                 st.one_of(numbers(), tensors(near.get(name))))
    (args if name in args else kwargs)[name] = value
    note(f"B={b} H={h} Hkv={hkv} Sq={sq} pages {block_size} append {append} "
         f"max_len {max_len} lengths {lengths}: {name} = {value!r}")
    return args, kwargs, name


@given(decode_calls())
def test_decode_matches_the_reference_or_refuses_clearly_before_writing(case):
    args, kwargs, name = case
    caches = [args[n] for n in ("k_cache", "v_cache")
              if isinstance(args[n], torch.Tensor) and args[n].dtype == torch.float32]
    before = [bits(c) for c in caches]
    ref = {n: value for n, value in kwargs.items() if n != "num_splits"}
    want, refused = call(attention_with_kvcache_reference, **args, **ref,
                         return_caches=True)   # leaves the caches as they are
    out, error = call(ab.attention_with_kvcache, **args, **kwargs)
    if error is not None:
        assert refused_clearly(error, name), error
        assert all(torch.equal(bits(c), was) for c, was in zip(caches, before))
        return
    assert refused is None, f"computed what the reference refuses: {refused}"
    o, k_after, v_after = want
    scale = kwargs.get("scale")
    if scale is None or abs(scale) <= 1e3:   # larger ones overflow float32 scores
        # (the cache's unwritten slots hold NaN: a length past them reads NaN)
        torch.testing.assert_close(out.double(), o, rtol=1e-4, atol=1e-4,
                                   equal_nan=True)
    for cache, after in ((args["k_cache"], k_after), (args["v_cache"], v_after)):
        torch.testing.assert_close(cache, after.to(cache.dtype), rtol=0, atol=0,
                                   equal_nan=True)
