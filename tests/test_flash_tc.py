"""Chapter 8's tensor-core kernels (every step, fp16 and bf16) against the float64
reference: their error must stay within 2x of SDPA's own error in the same dtype, on the
same inputs."""
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attnbook as ab
from attnbook.ops import flash_tc
from grid_limits import OVER_GRID_Y, SEAM, seam_key_lengths

NAN, INF = float("nan"), float("inf")
DTYPES = [torch.float16, torch.bfloat16]
STEPS = list(ab.TC_STEPS)
# (B, H, Hkv, Sq, Sk, D): S = 1, sizes off the tiles (64 rows; 64 or 32 keys), Sq < Sk
# and Sq > Sk, GQA ratios 1, 2 and 8, head dims 64 and 128 and two that are padded.
SHAPES = [(1, 1, 1, 1, 1, 64), (2, 2, 2, 17, 17, 64), (1, 4, 2, 65, 33, 128),
          (1, 2, 1, 3, 100, 64), (1, 2, 2, 100, 7, 128), (1, 8, 1, 127, 127, 64),
          (1, 2, 2, 20, 30, 32), (2, 2, 1, 9, 40, 80)]


def inputs(shape, dtype, device, seed=0, magnitude=1.0):
    b, h, hkv, sq, sk, d = shape
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*s, generator=g) for s in
               ((b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, d)))
    return tuple(t.to(dtype).to(device) for t in (q * magnitude, k * magnitude, v))


def sdpa(q, k, v, mask, dtype):
    """SDPA's math path on the inputs, computed in ``dtype`` (its error is the
    yardstick) or, with float64, the reference."""
    h, hkv = q.shape[1], k.shape[1]
    k, v = (t.repeat_interleave(h // hkv, dim=1) for t in (k, v))
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.to(dtype)
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype),
                                             attn_mask=mask)
    return out.double().nan_to_num()   # rows with no admitted key: NaN in SDPA, 0 here


def check_close(out, q, k, v, mask):
    """out's error against float64 is at most twice SDPA's error in out's dtype."""
    want = sdpa(q, k, v, mask, torch.float64)
    ours = (out.double() - want).abs().max().item()
    theirs = (sdpa(q, k, v, mask, q.dtype) - want).abs().max().item()
    assert ours <= 2 * theirs + 1e-6, f"error {ours:.3g}, SDPA's {theirs:.3g}"


@pytest.mark.parametrize("step,dtype,shape",
                         list(itertools.product(STEPS, DTYPES, SHAPES)))
def test_every_mask_within_sdpas_error(step, dtype, shape, device):
    q, k, v = inputs(shape, dtype, device)
    b, h, _, sq, sk, _ = shape
    for name, opts, mask in ab.masks.cases(b, h, sq, sk, dtype=dtype, device=device):
        out = ab.flash_attention_tc(q, k, v, step=step, **opts)
        assert out.dtype == dtype and out.shape == q.shape
        check_close(out, q, k, v, mask)


@pytest.mark.parametrize("step,order", list(itertools.product(
    STEPS, [("forward", 0), ("reverse", 0), ("shuffle", 7)])))
def test_thread_orders(step, order, device):
    """A missing barrier or __syncwarp changes the answer under some order."""
    shape = (2, 4, 2, 70, 90, 64)
    q, k, v = inputs(shape, torch.float16, device, seed=1)
    b, h, sq, sk = 2, 4, 70, 90
    for _, opts, mask in ab.masks.cases(b, h, sq, sk, dtype=torch.float16,
                                        device=device)[:5:2]:
        with ab.thread_order(*order):
            out = ab.flash_attention_tc(q, k, v, step=step, **opts)
        check_close(out, q, k, v, mask)


# Step 6's tiles are 128 rows by 128 (D 64) or 64 (D 128) keys: shapes with whole key
# tiles (its unmasked loop), a partial last one, and the tile before it (which the
# unmasked loop leaves to the masked one), Sq ≠ Sk both ways.
FA2_SHAPES = [(1, 2, 1, 130, 300, 64), (1, 2, 2, 150, 200, 128),
              (1, 2, 2, 300, 256, 64), (1, 1, 1, 129, 192, 128)]


@pytest.mark.parametrize("dtype,shape", list(itertools.product(DTYPES, FA2_SHAPES)))
def test_fa2_step_over_whole_key_tiles(dtype, shape, device):
    q, k, v = inputs(shape, dtype, device, seed=4)
    b, h, _, sq, sk, _ = shape
    for name, opts, mask in ab.masks.cases(b, h, sq, sk, dtype=dtype, device=device):
        out = ab.flash_attention_tc(q, k, v, step=6, **opts)
        check_close(out, q, k, v, mask)


@pytest.mark.parametrize("scale", [-0.3, 0.0, 1e-3])
def test_fa2_step_any_scale(scale, device):
    """Step 6 takes the max of raw scores, so a negative scale flips q's sign first."""
    q, k, v = inputs((1, 2, 2, 130, 200, 64), torch.float16, device, seed=8)
    for opts in ({}, dict(is_causal=True)):
        out = ab.flash_attention_tc(q, k, v, scale=scale, step=6, **opts)
        want = ab.attention_reference(q, k, v, scale=scale, float64=True, **opts)
        torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("order", [("reverse", 0), ("shuffle", 3)])
def test_fa2_step_thread_orders_over_whole_tiles(order, device):
    q, k, v = inputs((1, 2, 1, 130, 300, 64), torch.float16, device, seed=9)
    for _, opts, mask in ab.masks.cases(1, 2, 130, 300, dtype=torch.float16,
                                        device=device)[:4]:
        with ab.thread_order(*order):
            out = ab.flash_attention_tc(q, k, v, step=6, **opts)
        check_close(out, q, k, v, mask)


@pytest.mark.parametrize("which,value", [("k", NAN), ("k", INF), ("v", NAN),
                                         ("v", -INF)])
def test_fa2_step_causal_diagonal_as_the_general_mask(which, value, device):
    """Step 6 masks a whole tile on the causal diagonal by one compare per score; the
    same mask with an additive term of zeros takes the path that applies every rule.
    Both give the same rows, NaN where one gives NaN, with NaN or inf in a key past
    some rows' diagonal (key 200 of 256: tile 128-255 of rows 128-255 is such a
    tile), Sq = Sk and Sq < Sk. A bad k never reaches the rows that mask it; a bad
    v reaches the rows of its tile through 0·v, as in SDPA."""
    for sq, sk in ((256, 256), (200, 328)):
        q, k, v = inputs((1, 2, 1, sq, sk, 64), torch.float16, device, seed=11)
        dict(k=k, v=v)[which][:, :, sk - 56, 5] = value
        zeros = torch.zeros(sq, sk, dtype=torch.float16, device=device)
        out = ab.flash_attention_tc(q, k, v, is_causal=True, step=6)
        general = ab.flash_attention_tc(q, k, v, is_causal=True, attn_mask=zeros,
                                        step=6)
        assert torch.equal(out.isnan(), general.isnan())
        if which == "k":
            assert out[0, 0, : sq - 56].isfinite().all()   # rows before the bad key
        torch.testing.assert_close(out.nan_to_num(), general.nan_to_num(), rtol=2e-3,
                                   atol=2e-3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_log_sum_exp_and_large_scores(dtype, device):
    """Scores of order ±1e4 stay finite, and the lse is the reference's."""
    q, k, v = inputs((1, 2, 2, 40, 50, 64), dtype, device, seed=3, magnitude=100.0)
    for step in STEPS:
        o, lse = ab.flash_attention_tc(q, k, v, step=step, return_lse=True)
        assert torch.isfinite(o).all() and lse.dtype == torch.float32
        check_close(o, q, k, v, None)
        _, rlse = ab.attention_reference(q, k, v, float64=True, return_lse=True)
        torch.testing.assert_close(lse.double(), rlse, rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize("d,tiles", [(d, t) for d in flash_tc.TC_SWEEP
                                     for t in flash_tc.TC_SWEEP[d]])
def test_every_swept_tile_shape(d, tiles, device):
    q, k, v = inputs((2, 2, 1, 150, 90, d), torch.float16, device, seed=5)
    for _, opts, mask in ab.masks.cases(2, 2, 150, 90, dtype=torch.float16,
                                        device=device):
        o = ab.flash_attention_tc(q, k, v, step=5, tiles=tiles, **opts)
        check_close(o, q, k, v, mask)


def test_rows_with_no_admissible_key_are_zero(device):
    # causal: 70 rows see no key ...
    q, k, v = inputs((1, 1, 1, 80, 10, 64), torch.float16, device)
    v[:, :, 3] = NAN                                        # ... not even 0·NaN
    for step in STEPS:
        o, lse = ab.flash_attention_tc(q, k, v, is_causal=True, step=step,
                                       return_lse=True)
        assert (o[:, :, :70] == 0).all() and (lse[:, :, :70] == -INF).all()


def nan_cases():
    """(which, value, keywords): a NaN or inf in q, k, v or the additive mask."""
    for which, value in itertools.product("qkvm", [NAN, INF, -INF]):
        yield which, value, {}
        yield which, value, dict(is_causal=True)


@pytest.mark.parametrize("step", sorted({1, ab.ops.TC_FASTEST, 5, 6}))
@pytest.mark.parametrize("which,value,opts", list(nan_cases()))
def test_nan_and_inf_as_in_sdpa(step, which, value, opts, device):
    """SDPA's math path, NaN for NaN (masked keys: a masked k never reaches a row; a
    masked v does, through 0·v, as in SDPA)."""
    q, k, v = inputs((1, 2, 1, 9, 70, 64), torch.float16, device, seed=2)
    mask = torch.zeros(9, 70, dtype=torch.float16, device=device)
    target = dict(q=q, k=k, v=v, m=mask)[which]
    if which == "q":
        target[:, :, 3, 1] = value
    elif which == "m":
        target[3, 66] = value
    else:
        target[:, :, 66, 2] = value
    out = ab.flash_attention_tc(q, k, v, attn_mask=mask, step=step, **opts)
    causal = (torch.ones(9, 70, dtype=torch.bool, device=device).tril(61) if opts
              else None)
    full = mask if causal is None else mask.masked_fill(~causal, -INF)
    h = 2
    ke, ve = (t.repeat_interleave(h, dim=1).double() for t in (k, v))
    with sdpa_kernel(SDPBackend.MATH):
        want = F.scaled_dot_product_attention(q.double(), ke, ve,
                                              attn_mask=full.double())
    if which == "k" and causal is not None:   # rows that do not admit key 66
        clean = ab.flash_attention_tc(q, k.nan_to_num(0, 0, 0), v, **opts)
        want = torch.where(causal[:, 66].view(-1, 1), want, clean.double())
    assert torch.equal(out.isnan(), want.isnan())
    torch.testing.assert_close(out.double().nan_to_num(), want.nan_to_num(),
                               rtol=1e-2, atol=1e-2)


def test_a_padded_key_is_absent(device):
    """Keys past key_lengths are loaded as zeros: NaN in their k or v never arrives."""
    q, k, v = inputs((1, 2, 2, 40, 40, 64), torch.float16, device, seed=1)
    lengths = torch.tensor([30], device=device)
    clean = ab.attention(q, k, v, key_lengths=lengths, is_causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 33:], v2[:, :, 35:] = NAN, INF
    torch.testing.assert_close(ab.attention(q, k2, v2, key_lengths=lengths,
                                            is_causal=True), clean)


def test_attention_dispatches_half_precision_here(device):
    q, k, v = inputs((2, 4, 2, 33, 40, 64), torch.bfloat16, device, seed=6)
    want = ab.flash_attention_tc(q, k, v, is_causal=True)
    assert torch.equal(ab.attention(q, k, v, is_causal=True, enable_gqa=True), want)
    assert torch.equal(ab.Attention(is_causal=True, enable_gqa=True)(q, k, v), want)


def test_layouts(device):
    """[B, S, H, D] views run in place; rows that do not start on 16 bytes are
    copied."""
    x = torch.randn(2, 19, 4, 64).half().to(device)
    q = x.transpose(1, 2)
    want = sdpa(q, q, q, None, torch.float64)
    check_close(ab.attention(q, q, q), q, q, q, None)
    # 2-byte offset
    odd = torch.randn(2 * 4 * 19 * 64 + 1).half().to(device)[1:].view(2, 4, 19, 64)
    odd.copy_(q)
    torch.testing.assert_close(ab.attention(odd, odd, odd).double(), want,
                               rtol=1e-2, atol=2e-3)
    # row stride 68: not 16 B
    strided = torch.randn(2, 4, 19, 68).half().to(device)[..., :64]
    strided.copy_(q)
    assert torch.equal(ab.attention(strided, strided, strided), ab.attention(q, q, q))


def test_the_wrapper_refuses_misaligned_rows(device):
    """The kernels' 16-byte copies never see a misaligned row, even past the Python
    side."""
    module = ab.ops.extension("flash_tc").module(device)
    odd = torch.randn(1 * 2 * 9 * 64 + 1).half().to(device)[1:].view(1, 2, 9, 64)
    none = torch.empty(0, device=device)
    with pytest.raises(RuntimeError, match="16 bytes"):
        module.forward(odd, odd, odd, none, none, [0, 0, 0], 0.125, 5, 64, 64)


@pytest.mark.stack_independent
def test_more_than_65535_batch_heads(device):
    q = torch.randn(OVER_GRID_Y, 1, 1, 64).half().to(device)
    lengths = seam_key_lengths(device)
    o = ab.attention(q, q, q, key_lengths=lengths)
    torch.testing.assert_close(o[SEAM], q[SEAM])   # one key: o = v
    assert (o[lengths == 0] == 0).all()


def test_empty_inputs(device):
    for qs, ks in [((0, 2, 5, 64), (0, 2, 5, 64)), ((1, 2, 0, 64), (1, 2, 5, 64))]:
        assert ab.attention(torch.randn(qs).half().to(device),
                            *[torch.randn(ks).half().to(device)] * 2).shape == qs
    q, k = (torch.randn(s).half().to(device) for s in ((1, 2, 5, 64), (1, 2, 0, 64)))
    assert (ab.attention(q, k, k) == 0).all()


@pytest.mark.parametrize("call,err,match", [
    (lambda q: ab.flash_attention_tc(q.float(), q.float(), q.float()), TypeError,
     "float16 or bfloat16"),
    (lambda q: ab.attention(q, q, q, impl="tiled"), NotImplementedError, "chapter 8"),
    (lambda q: ab.flash_attention_fp32(q, q, q), NotImplementedError, "chapter 8"),
    (lambda q: ab.flash_attention_tc(q, q, q.bfloat16()), TypeError, "one dtype"),
    (lambda q: ab.flash_attention_tc(*[q.new_zeros(1, 1, 4, 192)] * 3), ValueError,
     "head_dim 192"),
    (lambda q: ab.flash_attention_tc(q, q, q, step=7), ValueError, "step must be"),
    (lambda q: ab.flash_attention_tc(q, q, q, step=5, tiles=(32, 32)), ValueError,
     r"not compiled for step 5 at head_dim 128"),
    (lambda q: ab.flash_attention_tc(q, q, q, step=2, tiles=(64, 64)), ValueError,
     "not compiled for step 2"),
])
def test_bad_input_is_a_clear_error(call, err, match, device):
    with pytest.raises(err, match=match):
        call(torch.zeros(1, 2, 4, 128, device=device).half())


@pytest.mark.parametrize("cap,dtype,tiles,match", [
    ((7, 0), torch.float16, (64, 64), "sm_75 or newer"),
    ((7, 5), torch.bfloat16, (64, 64), "bfloat16 tensor cores need sm_80"),
    ((7, 5), torch.float16, (64, 64), "need 81920 bytes"),     # D = 128, Bc = 64
])
def test_gpu_limits_are_checked_before_a_launch(monkeypatch, cap, dtype, tiles, match):
    """A GPU without the instruction, the dtype or the shared memory never launches."""
    class Props:
        shared_memory_per_block_optin = 64 * 1024   # a T4
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "GPU")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: Props)
    with pytest.raises((TypeError, ValueError, RuntimeError), match=match):
        flash_tc._check_device(dtype, torch.device("cuda", 0), 5, 128, tiles)


def test_registered_op_under_compile_and_meta(device):
    torch._dynamo.reset()
    q, k, v = inputs((1, 4, 2, 33, 40, 64), torch.float16, device, seed=4)

    def f(q, k, v):
        return ab.attention(q * 2, k, v, is_causal=True, enable_gqa=True).float().relu()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(q, k, v), f(q, k, v))
    m = torch.empty(2, 4, 50, 96, dtype=torch.bfloat16, device="meta")
    o, lse = ab.flash_attention_tc(m, m, m, return_lse=True)
    assert o.shape == m.shape and o.dtype == m.dtype and lse.dtype == torch.float32
