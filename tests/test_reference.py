import inspect
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import attnbook as ab
from loops import attention_loops


def qkv(b, h, hkv, sq, sk, d, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) * scale
            for s in ((b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, d))]


SHAPES = [(1, 1, 1, 1, 1, 4), (2, 2, 1, 5, 5, 8), (1, 4, 2, 3, 7, 5),
          (2, 3, 3, 7, 3, 4), (1, 2, 1, 1, 9, 8)]
RULES = [dict(), dict(is_causal=True), dict(stride=2), dict(stride=3, is_causal=True),
         dict(window=2), dict(window=3, is_causal=True), dict(key_lengths=True),
         dict(key_lengths=True, is_causal=True)]


@pytest.mark.parametrize("shape,rule", list(itertools.product(SHAPES, RULES)))
def test_matches_loops(shape, rule):
    b, h, hkv, sq, sk, d = shape
    q, k, v = qkv(*shape)
    rule = dict(rule)
    if rule.pop("key_lengths", False):
        rule["key_lengths"] = torch.tensor([max(1, sk - 2 * i) for i in range(b)])
    out, lse = ab.attention_reference(q, k, v, float64=True, return_lse=True, **rule)
    want, want_lse = attention_loops(q, k, v, **rule)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, want_lse, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("mshape", [(1, 1, 4, 6), (2, 1, 4, 6), (1, 3, 1, 6),
                                    (2, 3, 4, 6), (4, 6)])
def test_attn_mask_broadcast(kind, mshape):
    q, k, v = qkv(2, 3, 3, 4, 6, 8, seed=1)
    g = torch.Generator().manual_seed(2)
    mask = (torch.rand(mshape, generator=g) > 0.3 if kind == "bool"
            else torch.randn(mshape, generator=g))
    out, lse = ab.attention_reference(q, k, v, attn_mask=mask, float64=True,
                                      return_lse=True)
    want, want_lse = attention_loops(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, want_lse, rtol=1e-12, atol=1e-12)


def test_matches_sdpa_math_backend():
    q, k, v = qkv(2, 4, 4, 16, 16, 32, seed=3)
    mask = torch.randn(1, 4, 16, 16)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        for kwargs, ours in [(dict(is_causal=True), dict(is_causal=True)),
                             (dict(attn_mask=mask), dict(attn_mask=mask)),
                             (dict(scale=0.3), dict(scale=0.3))]:
            want = F.scaled_dot_product_attention(
                q.double(), k.double(), v.double(),
                **{a: (t.double() if torch.is_tensor(t) else t)
                   for a, t in kwargs.items()})
            torch.testing.assert_close(ab.attention_reference(q, k, v, float64=True,
                                                              **ours), want)


def test_gqa_equals_repeated_heads():
    q, k, v = qkv(1, 6, 2, 5, 5, 8, seed=4)
    out = ab.attention_reference(q, k, v, is_causal=True)
    want = ab.attention_reference(q, k.repeat_interleave(3, 1),
                                  v.repeat_interleave(3, 1), is_causal=True)
    torch.testing.assert_close(out, want)
    with pytest.raises(ValueError, match="multiple"):
        ab.attention_reference(q, k[:, :1].expand(1, 4, 5, 8)[:, :4],
                               v[:, :1].expand(1, 4, 5, 8))


def test_causal_is_bottom_right_when_sq_differs():
    # One query against 5 keys: a decode step sees every key; SDPA's top-left rule sees
    # one.
    q, k, v = qkv(1, 1, 1, 1, 5, 4, seed=5)
    out = ab.attention_reference(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ab.attention_reference(q, k, v))
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(top_left, v[:, :, :1])
    assert not torch.allclose(out, top_left)
    allowed = ab.masks.allowed(3, 5, is_causal=True)[0, 0]
    assert allowed.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]


def test_fully_masked_rows_are_zero_with_minus_inf_lse():
    q, k, v = qkv(2, 1, 1, 4, 2, 4, seed=6)
    # Sq > Sk with causal: the first two queries precede every key.
    out, lse = ab.attention_reference(q, k, v, is_causal=True, return_lse=True)
    assert torch.isfinite(out).all()
    assert (out[:, :, :2] == 0).all() and (lse[:, :, :2] == -math.inf).all()
    assert torch.isfinite(lse[:, :, 2:]).all()
    # A boolean mask that forbids everything in one row, and a zero key length.
    mask = torch.ones(1, 1, 4, 2, dtype=torch.bool)
    mask[..., 1, :] = False
    out, lse = ab.attention_reference(q, k, v, attn_mask=mask, return_lse=True)
    assert (out[:, :, 1] == 0).all() and (lse[:, :, 1] == -math.inf).all()
    out = ab.attention_reference(q, k, v, key_lengths=torch.tensor([0, 2]))
    assert (out[0] == 0).all() and (out[1] != 0).any()


def test_large_magnitudes_stay_finite():
    q, k, v = qkv(1, 2, 2, 8, 8, 16, seed=7, scale=100.0)
    out, lse = ab.attention_reference(q, k, v, return_lse=True)
    want, want_lse = attention_loops(q, k, v)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-3)


def test_lse_matches_logsumexp_and_default_dtype():
    q, k, v = qkv(1, 2, 2, 6, 6, 8, seed=8)
    out, lse = ab.attention_reference(q, k, v, scale=0.5, return_lse=True)
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    torch.testing.assert_close(lse, torch.logsumexp(0.5 * q @ k.transpose(-1, -2), -1))


@pytest.mark.parametrize("bad,err", [
    (dict(attn_mask=torch.zeros(3, 4, 6)), ValueError),
    (dict(attn_mask=torch.zeros(4, 6, dtype=torch.int32)), TypeError),
    (dict(stride=0), ValueError),
    (dict(window=-1), ValueError),
    (dict(key_lengths=torch.tensor([[1]])), ValueError),
])
def test_bad_options_raise(bad, err):
    q, k, v = qkv(2, 2, 2, 4, 6, 8)
    with pytest.raises(err):
        ab.attention_reference(q, k, v, **bad)


def test_head_dim_zero_gives_an_empty_result_as_sdpa():
    q, k, v = qkv(2, 2, 2, 4, 6, 0)
    out, lse = ab.attention_reference(q, k, v, return_lse=True)
    assert out.shape == F.scaled_dot_product_attention(q, k, v).shape == (2, 2, 4, 0)
    torch.testing.assert_close(lse, torch.full((2, 2, 4), math.log(6.0)))


def test_a_scale_beyond_float32_is_computed_in_float64():
    """The kernels refuse scale=1e300 (not a float32); the float64 yardstick computes
    it: (q · 1e-300) kᵀ · 1e300 is q kᵀ."""
    q, k, v = (t.double() for t in qkv(1, 1, 1, 3, 5, 8))
    torch.testing.assert_close(ab.attention_reference(q * 1e-300, k, v, scale=1e300),
                               ab.attention_reference(q, k, v, scale=1.0))


def test_bad_shapes_raise():
    q, k, v = qkv(2, 2, 2, 4, 6, 8)
    with pytest.raises(ValueError):
        ab.attention_reference(q[0], k, v)
    with pytest.raises(ValueError):
        ab.attention_reference(q, k[..., :4], v)
    with pytest.raises(ValueError):
        ab.attention_reference(q, k, v[:, :, :5])


def test_every_causal_mask_is_spelled_is_causal_and_the_old_name_warns():
    """One spelling across the API, SDPA's; ``causal=`` works for one release."""
    for fn in (ab.attention, ab.flash_attention_fp32, ab.flash_attention_tc,
               ab.attention_reference, ab.flash_attention_tiles,
               ab.attention_with_kvcache, ab.masks.allowed, ab.masks.bias):
        names = inspect.signature(fn).parameters
        assert "is_causal" in names and "causal" not in names, fn.__name__
    q = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    want = ab.attention_reference(q, q, q, is_causal=True)
    with pytest.warns(DeprecationWarning, match=r"attention_reference\(causal=\.\.\.\) "
                      "is now is_causal"):
        got = ab.attention_reference(q, q, q, causal=True)
    torch.testing.assert_close(got, want)
    assert not torch.equal(got, ab.attention_reference(q, q, q))
    with pytest.raises(TypeError, match="not both"):
        ab.masks.allowed(2, 3, causal=True, is_causal=True)


def test_every_mask_kind_has_its_keywords_and_no_other_kind_does():
    q = torch.randn(2, 3, 4, 8)
    k = torch.randn(2, 3, 5, 8)
    for kind in ab.masks.MASK_KINDS:
        options = ab.masks.kind_options(kind, 2, 3, 4, 5)
        assert ab.attention_reference(q, k, k, **options).shape == q.shape, kind
    with pytest.raises(ValueError, match="kind must be one of"):
        ab.masks.kind_options("diagonal", 2, 3, 4, 5)
