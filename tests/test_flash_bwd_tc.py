"""The tensor-core backward pass (kernels/flash_bwd_tc.cu), fp16 and bf16, both steps,
behind ab.attention's autograd: the error of dq, dk and dv against autograd of the
float64 reference must stay within 2x of PyTorch's own error when it computes the same
backward in the same dtype (FlashAttention's criterion), with every mask, GQA, Sq ≠ Sk
and sizes off every tile; the same bits in every thread order and under the
sanitizers."""
import itertools
import math

import pytest
import torch

import attnbook as ab
from test_flash_tc import inputs

DTYPES = [torch.float16, torch.bfloat16]
HEAD_DIMS = [64, 128]
MASKS = [case.name for case in ab.masks.cases(2, 2, 4, 4)]
# (B, H, Hkv): MHA, and GQA with two and four query heads a key head.
HEADS = {"MHA": (2, 2, 2), "GQA": (1, 4, 2), "MQA": (1, 4, 1)}
# (Sq, Sk): equal on a tile's edge; Sq < Sk and Sq > Sk off every tile (rows with no
# key under causal masks); S = 1.
LENGTHS = {"Sq = Sk": (64, 64), "Sq < Sk": (17, 80), "Sq > Sk": (80, 17),
           "S = 1": (1, 1)}
ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 7)]
STEPS = sorted(ab.ops.backward_tc.FLASH_BWD_TC_STEPS)


@pytest.fixture(params=STEPS, ids=lambda step: f"step {step}")
def step(request, monkeypatch):
    """Autograd's backward runs this step (ab.attention's own is step 2 from sm_80)."""
    monkeypatch.setattr(ab.ops.backward_tc, "tc_backward_step",
                        lambda device: request.param)
    return request.param


def leaves(shape, dtype, device, seed=0):
    return [t.requires_grad_() for t in inputs(shape, dtype, device, seed)]


def upstream(q, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(q.shape, generator=g).to(q.dtype).to(q.device)


def kernel_grads(q, k, v, do, opts):
    o = ab.attention(q, k, v, enable_gqa=True, **opts)
    return torch.autograd.grad(o, (q, k, v), do)


def reference_grads(q, k, v, do, opts):
    """Autograd of ab.attention_reference in float64."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    o = ab.attention_reference(q, k, v, float64=True, **opts)
    return torch.autograd.grad(o, (q, k, v), do.double())


def low_precision_grads(q, k, v, do, mask):
    """PyTorch's autograd of attention computed in q's dtype, every op in it (SDPA's
    math path, with a row of no admitted key giving zeros instead of NaN), on the CPU.
    ``mask``: the boolean or additive SDPA mask, or None."""
    q, k, v = (t.detach().cpu().requires_grad_() for t in (q, k, v))
    h, hkv = q.shape[1], k.shape[1]
    ke, ve = (t.repeat_interleave(h // hkv, dim=1) for t in (k, v))
    s = q @ ke.transpose(-1, -2) * (1 / math.sqrt(q.shape[-1]))
    if mask is not None:
        mask = mask.cpu()
        s = (s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool
             else s + mask.to(q.dtype))
    m = s.detach().amax(-1, keepdim=True)
    p = (s - m.masked_fill(m == -math.inf, 0)).exp()
    l = p.sum(-1, keepdim=True)
    o = p @ ve / l.masked_fill(l == 0, 1)
    return torch.autograd.grad(o, (q, k, v), do.cpu())


def check_grads(got, q, k, v, do, opts, mask, what=""):
    """Each gradient's largest error against float64 is at most twice PyTorch's in the
    same dtype, plus 1e-3 of the gradient's largest entry."""
    want = [g.cpu() for g in reference_grads(q, k, v, do, opts)]
    yardstick = low_precision_grads(q, k, v, do, mask)
    for name, ours, theirs, exact in zip(("dq", "dk", "dv"), got, yardstick, want):
        assert ours.dtype == q.dtype and ours.shape == exact.shape
        err = (ours.cpu().double() - exact).abs().max().item()
        base = (theirs.double() - exact).abs().max().item()
        slack = 1e-3 * exact.abs().max().item() + 1e-6
        assert err <= 2 * base + slack, (f"{name} {what}: error {err:.3g}, PyTorch's "
                                         f"{base:.3g}")


@pytest.mark.parametrize("dtype,d,mask", list(itertools.product(DTYPES, HEAD_DIMS,
                                                                MASKS)))
@pytest.mark.parametrize("heads,lengths", list(itertools.product(HEADS, LENGTHS)))
def test_gradients_within_pytorchs_error(dtype, d, mask, heads, lengths, step,
                                        device):
    b, h, hkv = HEADS[heads]
    sq, sk = LENGTHS[lengths]
    q, k, v = leaves((b, h, hkv, sq, sk, d), dtype, device)
    do = upstream(q)
    cases = {name: (opts, sdpa_mask)
             for name, opts, sdpa_mask in ab.masks.cases(b, h, sq, sk, dtype=dtype,
                                                         device=device)}
    opts, sdpa_mask = cases[mask]
    check_grads(kernel_grads(q, k, v, do, opts), q, k, v, do, opts, sdpa_mask)


@pytest.mark.parametrize("dtype", DTYPES)
def test_same_bits_in_every_thread_order(dtype, step, device):
    """No atomics: every element of dq, dk and dv (and of step 2's dQ slots) is one
    lane's sum in a fixed order, so a missing barrier is the only way for an order to
    change a bit."""
    q, k, v = leaves((2, 4, 2, 70, 90, 64), dtype, device, seed=2)
    do = upstream(q, seed=3)
    for _, opts, mask in ab.masks.cases(2, 4, 70, 90, dtype=dtype,
                                        device=device)[:5:2]:
        runs = []
        for order in ORDERS:
            with ab.thread_order(*order):
                runs.append(kernel_grads(q, k, v, do, opts))
        for run in runs[1:]:
            assert all(torch.equal(a, b) for a, b in zip(run, runs[0]))
        check_grads(runs[0], q, k, v, do, opts, mask)


@pytest.mark.parametrize("shape,opts", [
    ((1, 4, 2, 70, 67, 64), dict(is_causal=True)),
    ((2, 2, 1, 40, 45, 128), dict(window=9, key_lengths=torch.tensor([45, 7]))),
])
@pytest.mark.stack_independent
def test_clean_under_the_sanitizers(shape, opts, step):
    """memcheck and racecheck on the emulator, GQA and masks, off every tile, two
    tiles or more each way (a missing barrier between tiles is a race)."""
    q, k, v = leaves(shape, torch.float16, "cpu", seed=4)
    do = upstream(q, seed=5)
    plain = kernel_grads(q, k, v, do, opts)
    with ab.sanitize():
        checked = kernel_grads(q, k, v, do, opts)
    assert all(torch.equal(a, b) for a, b in zip(checked, plain))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradient_of_the_log_sum_exp(dtype, device):
    q, k, v = leaves((2, 4, 2, 30, 45, 64), dtype, device, seed=6)
    o, lse = ab.flash_attention_tc(q, k, v, is_causal=True, return_lse=True)
    weights = torch.linspace(-1, 1, 30, device=device)
    loss = (o.float() ** 2).sum() + (lse * weights).sum()
    got = torch.autograd.grad(loss, (q, k, v), retain_graph=True)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ro, rlse = ab.attention_reference(qd, kd, vd, is_causal=True, float64=True,
                                      return_lse=True)
    rloss = (ro ** 2).sum() + (rlse * weights.double()).sum()
    for a, b in zip(got, torch.autograd.grad(rloss, (qd, kd, vd), retain_graph=True)):
        torch.testing.assert_close(a.double(), b, rtol=2e-2, atol=5e-2)
    # only the lse: autograd passes a zero gradient for o, and v gets none
    dq, dk, dv = torch.autograd.grad((lse * weights).sum(), (q, k, v))
    want = torch.autograd.grad((rlse * weights.double()).sum(), (qd, kd))
    for a, b in zip((dq, dk), want):
        torch.testing.assert_close(a.double(), b, rtol=2e-2, atol=5e-2)
    assert (dv == 0).all()


@pytest.mark.parametrize("d", [32, 96])
def test_padded_head_dims(d, device):
    """Head dims other than 64 and 128 run zero-padded; the padding's gradient is
    dropped on the way back."""
    q, k, v = leaves((1, 4, 2, 33, 20, d), torch.float16, device, seed=7)
    do = upstream(q, seed=8)
    opts = dict(is_causal=True)
    got = kernel_grads(q, k, v, do, opts)
    sdpa_mask = ab.masks.cases(1, 4, 33, 20, device=device)[1].sdpa_mask
    check_grads(got, q, k, v, do, opts, sdpa_mask)


def test_strided_layouts(device):
    """ab.attention(...).backward() reaches the caller's [B, S, H, D] views."""
    x = (torch.randn(2, 19, 3 * 4 * 64) / 2).half().to(device).requires_grad_()
    q, k, v = (t.view(2, 19, 4, 64).transpose(1, 2) for t in x.chunk(3, -1))
    ab.attention(q, k, v, is_causal=True).float().square().sum().backward()
    xd = x.detach().double().requires_grad_()
    qd, kd, vd = (t.view(2, 19, 4, 64).transpose(1, 2) for t in xd.chunk(3, -1))
    ab.attention_reference(qd, kd, vd, is_causal=True).square().sum().backward()
    torch.testing.assert_close(x.grad.double(), xd.grad, rtol=2e-2, atol=1e-2)


def test_masked_keys_and_empty_rows_get_no_gradient(device):
    q, k, v = leaves((1, 2, 2, 80, 10, 64), torch.float16, device, seed=9)
    with torch.no_grad():   # causal: rows 0-69 see no key; past the length: 5-9
        k[:, :, 7], v[:, :, 6] = float("nan"), float("inf")
    o = ab.attention(q, k, v, is_causal=True,
                     key_lengths=torch.tensor([5], device=device))
    dq, dk, dv = torch.autograd.grad(o.float().sum(), (q, k, v))
    assert (dq[:, :, :70] == 0).all() and torch.isfinite(dq).all()
    assert (dk[:, :, 5:] == 0).all() and (dv[:, :, 5:] == 0).all()
    assert torch.isfinite(dk).all() and torch.isfinite(dv).all()


def test_torch_compile_backward(device):
    torch._dynamo.reset()
    q, k, v = leaves((2, 4, 2, 33, 40, 64), torch.float16, device, seed=10)

    def loss(q, k, v):
        return ab.attention(q * 2, k, v, is_causal=True,
                            enable_gqa=True).float().relu().sum()

    want = torch.autograd.grad(loss(q, k, v), (q, k, v))
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_empty_inputs(device):
    q, k = (torch.randn(s).half().to(device).requires_grad_()
            for s in ((1, 2, 5, 64), (1, 2, 0, 64)))
    dq, dk = torch.autograd.grad(ab.attention(q, k, k).float().sum(), (q, k))
    assert (dq == 0).all() and dk.shape == k.shape


def test_bad_input_is_a_clear_error(device):
    q, k, v = leaves((1, 2, 2, 5, 6, 64), torch.float16, device)
    mask = torch.zeros(5, 6, device=device, requires_grad=True)
    with pytest.raises(NotImplementedError, match="attn_mask requires grad"):
        ab.attention(q, k, v, attn_mask=mask)
    with pytest.raises(NotImplementedError, match="dropout"):
        ab.attention(q, k, v, dropout_p=0.1)
    ab.attention(q, k, v, attn_mask=mask.detach()).float().sum().backward()
    assert q.grad is not None
    o, lse = (t.detach() for t in ab.flash_attention_tc(q, k, v, return_lse=True))
    args = (None, None, None, [0, 0, 0], 0.125)
    backward = torch.ops.attnbook.flash_tc_backward
    with pytest.raises(ValueError, match="head_dim 32"):
        backward(*[t[..., :32] for t in (o, q, k, v, o)], lse, *args)
    with pytest.raises(RuntimeError, match="Half"):
        backward(o, q, k.bfloat16(), v, o, lse, *args)
    with pytest.raises(RuntimeError, match="lse must be"):
        backward(o, q, k, v, o, lse[:, :1], *args)


def test_opcheck_of_the_forward_with_its_autograd_and_the_backward(device):
    """Schemas, fakes, the autograd registration and AOT dispatch, by torch.library."""
    q, k, v = leaves((1, 4, 2, 17, 30, 64), torch.float16, device, seed=11)
    masks = (None, None, [1, 0, 0], 0.125)
    forward = torch.ops.attnbook.flash_tc_forward
    torch.library.opcheck(forward.default, (q, k, v, *masks, 5, 64, 64))
    o, lse = (t.detach() for t in forward(q, k, v, *masks, 5, 64, 64))
    torch.library.opcheck(torch.ops.attnbook.flash_tc_backward.default,
                          (upstream(q), *(t.detach() for t in (q, k, v)), o, lse,
                           None, *masks))


def step2_grads(q, k, v, do, slots, is_causal=True):
    """dq, dk, dv of step 2 with ``slots`` dQ slots, by the op itself."""
    o, lse = (t.detach() for t in ab.flash_attention_tc(q, k, v, is_causal=is_causal,
                                                        return_lse=True))
    return torch.ops.attnbook.flash_tc_backward(
        do, *(t.detach() for t in (q, k, v)), o, lse, None, None, None,
        [int(is_causal), 0, 0], q.shape[-1] ** -0.5, 2, slots)


@pytest.mark.parametrize("dtype", DTYPES)
def test_step_2s_slots_change_only_the_order_of_dqs_sums(dtype, device):
    """Three key blocks in one, two or three slots (a block then visits several key
    blocks, reloading K and V): dK and dV are the same bits whatever the slots, dQ
    differs by the order of its fp32 sums only, and each run is within PyTorch's
    error."""
    q, k, v = leaves((1, 4, 2, 70, 300, 64), dtype, device, seed=12)
    do = upstream(q, seed=13)
    runs = [step2_grads(q, k, v, do, slots) for slots in (1, 2, 3)]
    sdpa_mask = ab.masks.cases(1, 4, 70, 300, device=device)[1].sdpa_mask
    for run in runs:
        check_grads(run, q, k, v, do, dict(is_causal=True), sdpa_mask)
        assert torch.equal(run[1], runs[0][1]) and torch.equal(run[2], runs[0][2])
        torch.testing.assert_close(run[0], runs[0][0], rtol=0, atol=4e-3)


def test_step_2s_default_slots_are_the_fewest_that_finish_first():
    """A block of step 2 fills an SM, so s slots of B·Hkv heads run in
    ceil(s·B·Hkv / SMs) waves of ceil(key blocks / s) key blocks each. At 36 heads and
    4 key blocks on the emulator's 108 SMs, 2, 3 and 4 slots all take 2 such rounds:
    the op makes 2, the fewest (one block per SM, rounded up, would make 3). Its slots
    are the only memory that grows with their number: the peak says how many."""
    q, k, v = leaves((1, 36, 36, 16, 512, 64), torch.float16, "cpu", seed=16)
    do = upstream(q, seed=17)
    peak = {s: ab.peak_memory(lambda: step2_grads(q, k, v, do, s), "cpu")[0]
            for s in (0, 2, 3)}
    assert peak[0] == peak[2] < peak[3]


@pytest.mark.stack_independent
def test_step_2_with_fewer_slots_than_key_blocks_is_race_free_and_ordered():
    """One block over three key blocks: its K, V and tile buffers are reused across
    key blocks (a missing barrier there is a race), and its dQ slot is read and
    written in the same order in every thread order."""
    q, k, v = leaves((1, 2, 1, 40, 300, 64), torch.float16, "cpu", seed=14)
    do = upstream(q, seed=15)
    plain = step2_grads(q, k, v, do, 1, is_causal=False)
    with ab.sanitize():
        checked = step2_grads(q, k, v, do, 1, is_causal=False)
    assert all(torch.equal(a, b) for a, b in zip(checked, plain))
    for order in ORDERS[1:]:
        with ab.thread_order(*order):
            again = step2_grads(q, k, v, do, 1, is_causal=False)
        assert all(torch.equal(a, b) for a, b in zip(again, plain))


def test_steps_and_slots_out_of_range_are_clear_errors(device):
    q, k, v = leaves((1, 2, 2, 5, 6, 64), torch.float16, device)
    o, lse = (t.detach() for t in ab.flash_attention_tc(q, k, v, return_lse=True))
    args = (o, *(t.detach() for t in (q, k, v)), o, lse, None, None, None, [0, 0, 0],
            0.125)
    backward = torch.ops.attnbook.flash_tc_backward
    with pytest.raises(RuntimeError, match="steps 1 and 2, not 3"):
        backward(*args, 3)
    with pytest.raises(RuntimeError, match="slots must be >= 0"):
        backward(*args, 2, -1)


@pytest.mark.parametrize("capability, want", [((7, 5), 1), ((8, 0), 2), ((9, 0), 2)])
def test_a_t4_runs_step_1_and_sm_80_on_step_2(capability, want, monkeypatch):
    """Step 2's tiles take 81 KB (D = 64) and 145 KB (D = 128) of shared memory: more
    than sm_75 gives a block (64 KB)."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: capability)
    assert ab.ops.backward_tc.tc_backward_step(torch.device("cuda")) == want
    assert ab.ops.backward_tc.tc_backward_step(torch.device("cpu")) == 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sq, sk", [(200, 260), (300, 260)])
def test_step_2s_causal_diagonal_tiles(dtype, sq, sk, device):
    """Whole key blocks of 128 (D = 64) under a causal mask: the tiles on the diagonal
    take step 2's causal-only path; Sq > Sk leaves rows with no key."""
    q, k, v = leaves((1, 4, 2, sq, sk, 64), dtype, device, seed=16)
    do = upstream(q, seed=17)
    sdpa_mask = ab.masks.cases(1, 4, sq, sk, device=device)[1].sdpa_mask
    got = step2_grads(q, k, v, do, 0)
    check_grads(got, q, k, v, do, dict(is_causal=True), sdpa_mask)
