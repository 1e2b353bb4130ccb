"""attnbook.attention: every implementation against the float64 reference, for every
mask kind, under every thread order; and every bad-input rule."""
import itertools

import pytest
import torch

import attnbook as ab

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 11)]
# (B, H, Hkv, Sq, Sk, D): S=1, sizes off every tile, Sq != Sk both ways, grouped heads,
# odd D.
SHAPES = [(1, 1, 1, 1, 1, 8), (2, 2, 1, 17, 17, 33), (1, 3, 3, 5, 40, 16),
          (2, 2, 2, 40, 9, 7)]
# The fused kernel's head dims, with sizes off its 64×32 tiles: S=1, Sq != Sk both ways,
# more than one query tile, grouped heads.
FLASH_SHAPES = [(1, 1, 1, 1, 1, 32), (2, 2, 1, 17, 40, 64), (1, 2, 2, 70, 9, 96),
                (2, 2, 1, 65, 100, 128)]


def inputs(shape, device, seed=0, magnitude=1.0):
    b, h, hkv, sq, sk, d = shape
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*s, generator=g) * magnitude).to(device)
            for s in ((b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, d))]


def mask_options(kind, shape, device):
    """Keyword arguments of every attention function for a mask kind, on ``device``."""
    b, h, _, sq, sk, _ = shape
    return ab.masks.kind_options(kind, b, h, sq, sk, device=device)


@pytest.mark.parametrize("impl,shape,kind,order",
                         list(itertools.product(["naive", "tiled"], SHAPES,
                                                ab.masks.MASK_KINDS, ORDERS))
                         + list(itertools.product(["flash"], FLASH_SHAPES,
                                                  ab.masks.MASK_KINDS, ORDERS)))
def test_matches_reference(impl, shape, kind, order, device):
    q, k, v = inputs(shape, device)
    options = mask_options(kind, shape, device)
    with ab.thread_order(*order):
        out = ab.attention(q, k, v, impl=impl, enable_gqa=True, **options)
    want = ab.attention_reference(q, k, v, float64=True, **options)
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("impl", ["naive", "tiled", "flash"])
def test_large_magnitudes_and_empty_rows(impl, device):
    # scores ~ ±1e4
    q, k, v = inputs((1, 2, 2, 70, 6, 32), device, seed=2, magnitude=30.0)
    out = ab.attention(q, k, v, is_causal=True, impl=impl)          # 64 rows see no key
    want = ab.attention_reference(q, k, v, is_causal=True, float64=True)
    assert torch.isfinite(out).all() and (out[:, :, :64] == 0).all()
    torch.testing.assert_close(out.double(), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("impl,d", [("naive", 16), ("flash", 32)])
def test_module_wrapper_and_scale(impl, d, device):
    q, k, v = inputs((1, 2, 2, 9, 9, d), device, seed=3)
    mod = ab.Attention(impl=impl, is_causal=True, scale=0.2)
    want = ab.attention_reference(q, k, v, is_causal=True, scale=0.2, float64=True)
    torch.testing.assert_close(mod(q, k, v).double(), want, rtol=1e-4, atol=1e-5)


def test_flash_is_the_default(device):
    # head_dim 8: the fused kernel says so
    q, k, v = inputs((1, 2, 2, 9, 9, 8), device, seed=3)
    with pytest.raises(ValueError, match="not supported by the fused kernel"):
        ab.attention(q, k, v)
    with pytest.raises(ValueError, match="not supported by the fused kernel"):
        ab.Attention()(q, k, v)


def test_flash_impl_agrees_with_naive(device):
    q, k, v = inputs((2, 4, 2, 33, 50, 64), device, seed=4)
    for causal in (False, True):
        torch.testing.assert_close(
            ab.attention(q, k, v, is_causal=causal, impl="flash", enable_gqa=True),
            ab.attention(q, k, v, is_causal=causal, impl="naive", enable_gqa=True),
            rtol=1e-4, atol=1e-5)


def unchanged(q, k, v):
    return q, k, v


# args: good q, k, v -> the bad call's positional arguments; the keywords' tensors are
# moved to the device in the test.
@pytest.mark.parametrize("args,kwargs,err,match", [
    (lambda q, k, v: (q.double(), k, v), {}, TypeError, "q must be float32"),
    (lambda q, k, v: (q[0], k, v), {}, ValueError, "same number of dimensions"),
    (lambda q, k, v: (q, k[:, :, :3].contiguous(), v), {}, ValueError,
     "k and v must have the same shape"),
    (lambda q, k, v: (q[:, :3].contiguous(), k, v), {}, ValueError,
     "multiple of key/value heads"),
    (lambda q, k, v: (q, k[..., :4].contiguous(), v[..., :4].contiguous()), {},
     ValueError, "D=8"),
    (unchanged, dict(attn_mask=torch.zeros(3, 5, 6)), ValueError, "does not broadcast"),
    (unchanged, dict(attn_mask=torch.zeros(5, 6, dtype=torch.int64)), TypeError,
     "bool or floating"),
    (unchanged, dict(key_lengths=torch.tensor([1.0, 2.0])), ValueError, "key_lengths"),
    (unchanged, dict(key_lengths=torch.tensor([1, 2, 3])), ValueError, "key_lengths"),
    (unchanged, dict(stride=0), ValueError, "stride"),
    (unchanged, dict(window=True), ValueError, "window"),
    (unchanged, dict(impl="magic"), ValueError, "impl"),
    # every output NaN where the float64 reference is finite: refused
    (unchanged, dict(scale=1e300), ValueError, "scale=1e.300 is not a finite float32"),
    (unchanged, dict(scale=float("nan")), ValueError, "not a finite float32"),
    (unchanged, dict(impl="flash"), ValueError, "head_dim"),
    (lambda q, k, v: ("q", k, v), {}, TypeError, "q must be a tensor"),
])
def test_bad_inputs_raise_before_launch(args, kwargs, err, match, device):
    kwargs = {key: val.to(device) if torch.is_tensor(val) else val
              for key, val in kwargs.items()}
    with pytest.raises(err, match=match):
        ab.attention(*args(*inputs((2, 4, 2, 5, 6, 8), device)),
                     **{"enable_gqa": True, **kwargs})


@pytest.mark.parametrize("stride,extra", [(2, {}), (3, dict(is_causal=True)),
                                          (5, dict(window=40)),
                                          (4, dict(is_causal=True, window=9))])
def test_strided_gather_equals_dense_masking(stride, extra, device):
    """The tiled path's strided attention reads only every stride-th key; it must agree
    with computing every score and masking, on shapes larger than one 64×64 GEMM
    tile."""
    q, k, v = inputs((2, 4, 2, 131, 200, 64), device, seed=5)
    opts = dict(scale=0.125, stride=stride, **extra)
    gathered = ab.ops.three_kernels(q, k, v, **opts)
    dense = ab.ops.three_kernels(q, k, v, **opts, gather=False)
    want = ab.attention_reference(q, k, v, scale=0.125, stride=stride,
                                  is_causal=extra.get("is_causal", False),
                                  window=extra.get("window"), float64=True)
    torch.testing.assert_close(gathered.double(), want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dense.double(), want, rtol=1e-4, atol=1e-5)
