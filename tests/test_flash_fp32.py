"""The fused fp32 kernel, each of chapter 7's steps, against the float64 reference,
under every thread order."""
import itertools

import pytest
import torch

import attnbook as ab

from attnbook.ops.flash import FLASH_FP32_HEAD_DIMS, FLASH_FP32_STEPS

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 7)]
# (B, H, Hkv, Sq, Sk, D): S=1, sizes that are not multiples of the tiles
# (64 rows; 32 or 64 keys), Sq < Sk (decode-like), Sq > Sk (rows with no admissible
# causal key), grouped heads.
SHAPES = [(1, 1, 1, 1, 1, 32), (2, 2, 2, 17, 17, 64), (1, 4, 2, 65, 33, 32),
          (1, 2, 1, 3, 100, 96), (1, 2, 2, 100, 7, 128), (2, 3, 1, 64, 64, 64),
          (1, 2, 1, 130, 150, 64)]


def inputs(shape, device, seed=0, magnitude=1.0):
    b, h, hkv, sq, sk, d = shape
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*s, generator=g) * magnitude).to(device)
            for s in ((b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, d))]


@pytest.mark.parametrize("shape,causal,order,step", list(
    itertools.product(SHAPES, [False, True], ORDERS, FLASH_FP32_STEPS)))
def test_matches_reference(shape, causal, order, step, device):
    q, k, v = inputs(shape, device)
    with ab.thread_order(*order):
        o, lse = ab.flash_attention_fp32(q, k, v, is_causal=causal, step=step,
                                         return_lse=True)
    ro, rlse = ab.attention_reference(q, k, v, is_causal=causal, float64=True,
                                      return_lse=True)
    torch.testing.assert_close(o.double(), ro, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(lse.double(), rlse, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("step", FLASH_FP32_STEPS)
def test_rows_with_no_admissible_key_are_zero(step, device):
    # causal: the first 70 queries precede every key
    q, k, v = inputs((1, 1, 1, 80, 10, 64), device)
    o, lse = ab.flash_attention_fp32(q, k, v, is_causal=True, step=step,
                                     return_lse=True)
    assert (o[:, :, :70] == 0).all() and (lse[:, :, :70] == float("-inf")).all()
    assert torch.isfinite(o).all() and torch.isfinite(lse[:, :, 70:]).all()


@pytest.mark.parametrize("step", FLASH_FP32_STEPS)
def test_large_magnitudes_stay_finite(step, device):
    # scores of order ±1e4
    q, k, v = inputs((1, 2, 2, 40, 100, 64), device, seed=3, magnitude=30.0)
    o, lse = ab.flash_attention_fp32(q, k, v, step=step, return_lse=True)
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
    for opts in (dict(is_causal=True, window=20),
                 dict(key_lengths=lengths, attn_mask=bias)):
        o = ab.flash_attention_fp32(q, k, v, step=1, tiles=tiles, **opts)
        want = ab.attention_reference(q, k, v, float64=True, **opts)
        torch.testing.assert_close(o.double(), want, rtol=1e-4, atol=1e-5)


def test_uncompiled_tiles_and_steps_are_rejected(device):
    q, k, v = inputs((1, 1, 1, 4, 4, 32), device)
    with pytest.raises(ValueError, match=r"tiles \(32, 32\) are not compiled for "
                                         r"step 1 at head_dim 32"):
        ab.flash_attention_fp32(q, k, v, step=1, tiles=(32, 32))
    with pytest.raises(ValueError, match=r"tiles \(64, 32\) are not compiled for "
                                         r"step 2 at head_dim 32: use \(64, 64\)"):
        ab.flash_attention_fp32(q, k, v, step=2, tiles=(64, 32))
    with pytest.raises(ValueError, match=r"step must be one of \(1, 2, 3\), got 4"):
        ab.flash_attention_fp32(q, k, v, step=4)


# ---- step 2: register tiles ----------------------------------------------------------
def mask_cases(b, h, sq, sk):
    """Every mask kind (``ab.masks.cases``) and the combinations that stress the tiles:
    windows across tiles, key lengths down to 0 under the causal mask, -inf in an
    additive mask with a stride. Keywords for the reference; ``on`` moves them."""
    g = torch.Generator().manual_seed(sq * sk)
    lengths = torch.randint(0, sk + 1, (b,), generator=g)
    bias = torch.randn(1, h, sq, sk, generator=g)
    bias[..., ::5] = float("-inf")
    return [case.options for case in ab.masks.cases(b, h, sq, sk)] + [
        dict(window=37), dict(is_causal=True, window=70),
        dict(is_causal=True, key_lengths=lengths), dict(attn_mask=bias, stride=2)]


def on(options, device):
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in options.items()}


@pytest.mark.parametrize("step", [2, 3])
@pytest.mark.parametrize("d", FLASH_FP32_HEAD_DIMS)
@pytest.mark.parametrize("sq,sk", [(70, 150), (150, 70), (1, 129)])
def test_register_tiles_match_reference_for_every_mask(d, sq, sk, step, device):
    """Steps 2 and 3 within 1e-5 of the float64 reference, relative to the output's
    scale: every mask, grouped heads, Sq ≠ Sk both ways, sizes off the 64 x 64 tiles."""
    q, k, v = inputs((2, 4, 2, sq, sk, d), device, seed=d + sq)
    for options in mask_cases(2, 4, sq, sk):
        o = ab.flash_attention_fp32(q, k, v, step=step, **on(options, device))
        want = ab.attention_reference(q.cpu(), k.cpu(), v.cpu(), float64=True,
                                      **options)
        scale = want.abs().max().clamp(min=1.0)
        assert (o.cpu().double() - want).abs().max() <= 1e-5 * scale, (options.keys(),)


def test_register_tiles_copy_rows_that_do_not_start_on_16_bytes(device):
    """16-byte loads need rows on 16 bytes: a view 4 bytes off is copied by the op,
    and refused by the extension function that would read it."""
    x = torch.randn(1, 2, 40, 65, device=device)
    q = k = v = x[..., 1:]                       # rows start 4 bytes past 16
    o = ab.flash_attention_fp32(q, k, v)
    want = ab.attention_reference(q, k, v, float64=True)
    torch.testing.assert_close(o.double(), want, rtol=1e-4, atol=1e-5)
    module = ab.ops.registry.extension("flash_fp32").module(device)
    none = q.new_empty(0)
    with pytest.raises(RuntimeError, match="q must start on 16 bytes"):
        module.flash_forward(q, k, v, none, none, [0, 0, 0], 0.125, 2, 64, 64)


def test_step_3_is_differentiated_by_step_2s_backward(device):
    """Step 3 computes step 2's forward: autograd runs step 2's backward for it, and
    the gradients agree."""
    shape = (1, 2, 1, 40, 50, 64)
    q, k, v = (t.requires_grad_() for t in inputs(shape, device, seed=6))
    grads = []
    for step in (2, 3):
        ab.flash_attention_fp32(q, k, v, is_causal=True, step=step).sum().backward()
        grads.append([t.grad for t in (q, k, v)])
        q.grad = k.grad = v.grad = None
    for ours, theirs in zip(*grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
