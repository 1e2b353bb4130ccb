"""The fused fp32 kernel against the float64 reference, under every thread order."""
import itertools

import pytest
import torch

import attnbook as ab

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 7)]
# (B, H, Hkv, Sq, Sk, D): S=1, sizes that are not multiples of the tiles
# (64 rows, 32 keys), Sq < Sk (decode-like), Sq > Sk (rows with no admissible causal
# key), grouped heads.
SHAPES = [(1, 1, 1, 1, 1, 32), (2, 2, 2, 17, 17, 64), (1, 4, 2, 65, 33, 32),
          (1, 2, 1, 3, 100, 96), (1, 2, 2, 100, 7, 128), (2, 3, 1, 64, 64, 64)]


def inputs(shape, device, seed=0, magnitude=1.0):
    b, h, hkv, sq, sk, d = shape
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*s, generator=g) * magnitude).to(device)
            for s in ((b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, d))]


@pytest.mark.parametrize("shape,causal,order",
                         list(itertools.product(SHAPES, [False, True], ORDERS)))
def test_matches_reference(shape, causal, order, device):
    q, k, v = inputs(shape, device)
    with ab.thread_order(*order):
        o, lse = ab.flash_attention_fp32(q, k, v, causal=causal, return_lse=True)
    ro, rlse = ab.attention_reference(q, k, v, causal=causal, float64=True,
                                      return_lse=True)
    torch.testing.assert_close(o.double(), ro, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(lse.double(), rlse, rtol=1e-4, atol=1e-5)


def test_rows_with_no_admissible_key_are_zero(device):
    # causal: the first 70 queries precede every key
    q, k, v = inputs((1, 1, 1, 80, 10, 64), device)
    o, lse = ab.flash_attention_fp32(q, k, v, causal=True, return_lse=True)
    assert (o[:, :, :70] == 0).all() and (lse[:, :, :70] == float("-inf")).all()
    assert torch.isfinite(o).all() and torch.isfinite(lse[:, :, 70:]).all()


def test_large_magnitudes_stay_finite(device):
    # scores of order ±1e4
    q, k, v = inputs((1, 2, 2, 40, 40, 64), device, seed=3, magnitude=30.0)
    o, lse = ab.flash_attention_fp32(q, k, v, return_lse=True)
    ro, rlse = ab.attention_reference(q, k, v, float64=True, return_lse=True)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    torch.testing.assert_close(o.double(), ro, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(lse.double(), rlse, rtol=1e-5, atol=1e-2)


def test_explicit_scale(device):
    q, k, v = inputs((1, 2, 2, 20, 30, 32), device, seed=4)
    o = ab.flash_attention_fp32(q, k, v, scale=0.3)
    torch.testing.assert_close(o.double(),
                               ab.attention_reference(q, k, v, scale=0.3, float64=True),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("change,match", [
    (lambda q, k, v: (q[..., :24].contiguous(), k[..., :24].contiguous(),
                      v[..., :24].contiguous()), "head_dim 24"),
    (lambda q, k, v: (q.double(), k, v), "q must be float32"),
    (lambda q, k, v: (q, k[:, :, :5].contiguous(), v),
     "k and v must have the same shape"),
    (lambda q, k, v: (q, k[:, :1].contiguous().expand(1, 3, 6, 32).contiguous(),
                      v[:, :1].contiguous().expand(1, 3, 6, 32).contiguous()),
     "multiple"),
    (lambda q, k, v: (q[0], k, v), "same number of dimensions"),
])
def test_bad_inputs_raise_clear_errors(change, match, device):
    q, k, v = inputs((1, 2, 2, 5, 6, 32), device)
    with pytest.raises((TypeError, ValueError), match=match):
        ab.flash_attention_fp32(*change(q, k, v))


@pytest.mark.parametrize("tiles", ab.ops.flash.FLASH_FP32_SWEEP)
def test_every_swept_tile_shape(tiles, device):
    """Each (Br, Bc) of chapter 7's sweep, on sizes off its tiles, with the masks that
    change which tiles are loaded (causal, window, key padding) and one that is per
    element (bias)."""
    q, k, v = inputs((2, 2, 1, 70, 90, 64), device, seed=5)
    lengths = torch.tensor([90, 41], device=device)
    bias = torch.randn(1, 2, 70, 90).to(device)
    for opts in (dict(causal=True, window=20),
                 dict(key_lengths=lengths, attn_mask=bias)):
        o = ab.flash_attention_fp32(q, k, v, tiles=tiles, **opts)
        ref = {("causal" if key == "causal" else key): val for key, val in opts.items()}
        torch.testing.assert_close(o.double(),
                                   ab.attention_reference(q, k, v, float64=True, **ref),
                                   rtol=1e-4, atol=1e-5)


def test_uncompiled_tiles_are_rejected(device):
    q, k, v = inputs((1, 1, 1, 4, 4, 32), device)
    with pytest.raises(ValueError,
                       match=r"tiles \(32, 32\) are not compiled for head_dim 32"):
        ab.flash_attention_fp32(q, k, v, tiles=(32, 32))
