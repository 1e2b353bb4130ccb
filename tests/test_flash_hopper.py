"""Chapter 12's Hopper kernels (fp16 and bf16, sm_90a: the emulator, or an H100/H200)
against the float64 reference, as chapter 8's: the error within 2x of SDPA's own error
in the same dtype, on the same inputs, for every mask; thread orders, the sanitizer,
NaN and inf as SDPA treats them, and clear errors."""
import itertools

import pytest
import torch

import attnbook as ab
from test_flash_tc import DTYPES, NAN, INF, check_close, inputs

STEPS = list(ab.HOPPER_STEPS)
# (B, H, Hkv, Sq, Sk, D): S = 1, sizes off the 64-row and 64-key tiles, Sq < Sk and
# Sq > Sk, GQA ratios 1, 2 and 8, head dims 64 and 128.
SHAPES = [(1, 1, 1, 1, 1, 64), (2, 2, 2, 17, 17, 128), (1, 4, 2, 65, 130, 64),
          (1, 2, 1, 3, 100, 128), (1, 2, 2, 100, 7, 64), (1, 8, 1, 127, 127, 64)]


@pytest.fixture(autouse=True)
def hopper(device):
    if device == "cuda" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("chapter 12's kernels need an H100 or H200")


@pytest.mark.parametrize("step,dtype,shape",
                         list(itertools.product(STEPS, DTYPES, SHAPES)))
def test_every_mask_within_sdpas_error(step, dtype, shape, device):
    q, k, v = inputs(shape, dtype, device)
    b, h, _, sq, sk, _ = shape
    for name, opts, mask in ab.masks.cases(b, h, sq, sk, dtype=dtype, device=device):
        out = ab.flash_attention_hopper(q, k, v, step=step, **opts)
        assert out.dtype == dtype and out.shape == q.shape, name
        check_close(out, q, k, v, mask)


@pytest.mark.parametrize("step,scale,d", [(s, *sd) for s in STEPS for sd in
                                           ((-0.3, 64), (0.0, 64), (-0.3, 128))])
def test_any_scale(step, scale, d, device):
    """The softmax takes the max of the raw scores in an unmasked tile: a negative
    scale sends every tile down the masked path, which scales first."""
    q, k, v = inputs((1, 2, 2, 70, 200, d), torch.float16, device, seed=8)
    for opts in ({}, dict(is_causal=True)):
        out = ab.flash_attention_hopper(q, k, v, scale=scale, step=step, **opts)
        want = ab.attention_reference(q, k, v, scale=scale, float64=True, **opts)
        torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("step,order", list(itertools.product(
    STEPS, [("forward", 0), ("reverse", 0), ("shuffle", 7)])))
def test_thread_orders(step, order, device):
    """A missing barrier, fence or wait changes the answer under some order."""
    q, k, v = inputs((1, 2, 1, 70, 150, 64), torch.float16, device, seed=1)
    for _, opts, mask in ab.masks.cases(1, 2, 70, 150, dtype=torch.float16,
                                        device=device)[:5:2]:
        with ab.thread_order(*order):
            out = ab.flash_attention_hopper(q, k, v, step=step, **opts)
        check_close(out, q, k, v, mask)


@pytest.mark.stack_independent
@pytest.mark.parametrize("step", STEPS)
def test_sanitizer_clean(step, device):
    if device != "cpu":
        pytest.skip("the sanitizer is the emulator's")
    q, k, v = inputs((1, 1, 1, 70, 130, 64), torch.bfloat16, device, seed=4)
    with ab.sanitize():
        out = ab.flash_attention_hopper(q, k, v, is_causal=True, step=step)
    check_close(out, q, k, v, torch.ones(70, 130, dtype=torch.bool).tril(60))


@pytest.mark.stack_independent
@pytest.mark.parametrize("step", [3, 4, 5])
def test_the_ring_wraps_its_parities(step, device):
    """More key tiles than two rounds of the ring (two buffers for steps 3-4, three
    for step 5): the producer waits on empty[s] with parity 1 and the consumers come
    back to full[s] with parity 0, under a shuffled order and the sanitizer."""
    q, k, v = inputs((1, 1, 1, 130, 450, 64), torch.float16, device, seed=5)
    with ab.thread_order("shuffle", 3):
        check_close(ab.flash_attention_hopper(q, k, v, step=step), q, k, v, None)
    if device == "cpu":
        with ab.sanitize():
            ab.flash_attention_hopper(q, k, v, is_causal=True, step=step)


@pytest.mark.parametrize("d", [64, 128])
def test_steps_4_and_5_give_step_3s_bits(d, device):
    """The turns (step 4) and the pipeline (step 5) change when each product runs, not
    what it computes: the same bits as step 3 for every mask, with grouped heads."""
    q, k, v = inputs((1, 4, 2, 150, 200, d), torch.bfloat16, device, seed=6)
    for name, opts, _ in ab.masks.cases(1, 4, 150, 200, dtype=torch.bfloat16,
                                        device=device):
        three = ab.flash_attention_hopper(q, k, v, step=3, **opts)
        for step in (4, 5):
            assert torch.equal(ab.flash_attention_hopper(q, k, v, step=step, **opts),
                               three), (name, step)


@pytest.mark.parametrize("dtype", DTYPES)
def test_log_sum_exp_large_scores_and_empty_rows(dtype, device):
    q, k, v = inputs((1, 2, 2, 40, 50, 128), dtype, device, seed=3, magnitude=100.0)
    for step in STEPS:
        o, lse = ab.flash_attention_hopper(q, k, v, step=step, return_lse=True)
        assert torch.isfinite(o).all() and lse.dtype == torch.float32
        check_close(o, q, k, v, None)
        _, rlse = ab.attention_reference(q, k, v, float64=True, return_lse=True)
        torch.testing.assert_close(lse.double(), rlse, rtol=1e-5, atol=1e-2)
    q, k, v = inputs((1, 1, 1, 80, 10, 64), dtype, device)   # causal: 70 rows see no
    v[:, :, 3] = NAN                                         # key, not even 0·NaN
    for step in STEPS:
        o, lse = ab.flash_attention_hopper(q, k, v, is_causal=True, return_lse=True,
                                           step=step)
        assert (o[:, :, :70] == 0).all() and (lse[:, :, :70] == -INF).all()


@pytest.mark.parametrize("step,which,value",
                         list(itertools.product(STEPS, "qkv", [NAN, INF])))
def test_nan_and_inf_as_in_sdpa(step, which, value, device):
    q, k, v = inputs((1, 2, 1, 9, 70, 64), torch.float16, device, seed=2)
    dict(q=q, k=k, v=v)[which][:, :, 3 if which == "q" else 66, 1] = value
    out = ab.flash_attention_hopper(q, k, v, step=step)
    want = ab.flash_attention_tc(q, k, v)   # chapter 8's, tested against SDPA's
    assert torch.equal(out.isnan(), want.isnan())
    torch.testing.assert_close(out.nan_to_num(), want.nan_to_num(), rtol=1e-2,
                               atol=1e-2)


@pytest.mark.parametrize("step", STEPS)
def test_a_padded_key_is_absent_and_no_key_is_zeros(step, device):
    """Keys past key_lengths are zeros by the time P V reads them (TMA fills zeros only
    past Sk): NaN in their k or inf in their v never arrives. With no key at all, every
    row is zeros and its lse -inf."""
    q, k, v = inputs((1, 2, 2, 40, 100, 64), torch.float16, device, seed=1)
    lengths = torch.tensor([90], device=device)
    clean = ab.flash_attention_hopper(q, k, v, key_lengths=lengths, is_causal=True,
                                      step=step)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 93:], v2[:, :, 95:] = NAN, INF
    torch.testing.assert_close(ab.flash_attention_hopper(
        q, k2, v2, key_lengths=lengths, is_causal=True, step=step), clean)
    none = k[:, :, :0]
    o, lse = ab.flash_attention_hopper(q, none, none, step=step, return_lse=True)
    assert (o == 0).all() and (lse == -INF).all()


@pytest.mark.parametrize("step", STEPS)
def test_views_as_models_pass_them(step, device):
    """[B, S, H, D] memory seen as [B, H, S, D] (the strides a TMA map takes in any
    order), keys and values broadcast over the batch (stride 0: copied for TMA), and
    one head of several batches (a stride the map is given, not the view's)."""
    q, k, v = inputs((2, 3, 3, 70, 90, 64), torch.float16, device, seed=5)
    bshd = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)]
    check_close(ab.flash_attention_hopper(*bshd, step=step), q, k, v, None)
    k1, v1 = (t[:1].expand(2, -1, -1, -1) for t in (k, v))
    check_close(ab.flash_attention_hopper(q, k1, v1, step=step), q, k1, v1, None)
    one = [t[:, 1:2] for t in (q, k, v)]
    check_close(ab.flash_attention_hopper(*one, is_causal=True, step=step), *one,
                torch.ones(70, 90, dtype=torch.bool).tril(20))


@pytest.mark.parametrize("call,err,match", [
    (lambda q: ab.flash_attention_hopper(q, q, q, step=9), ValueError, "step must"),
    (lambda q: ab.flash_attention_hopper(q[..., :32], q[..., :32], q[..., :32]),
     ValueError, "head_dim 32 is not compiled"),
    (lambda q: ab.flash_attention_hopper(q.float(), q.float(), q.float()), TypeError,
     "float16 or bfloat16"),
    (lambda q: ab.flash_attention_hopper(*(q.clone().requires_grad_(),) * 3),
     NotImplementedError, "forward only"),
])
def test_bad_input_is_a_clear_error(call, err, match, device):
    q = torch.randn(1, 1, 8, 64, device=device).half()
    with pytest.raises(err, match=match):
        call(q)
