"""The backward pass: Algorithm 2 tile by tile against autograd of the float64 reference
(and gradcheck), and the CUDA kernels on each device (GPU or emulator) against the same,
under every thread order, with every mask."""
import itertools
from unittest import mock

import pytest
import torch

import attnbook as ab
from attnbook.reference.flash_backward import (attention_tiles_autograd,
                                               flash_backward_tiles)

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 7)]
# (B, H, Hkv, Sq, Sk, D): S = 1, sizes off every tile, Sq < Sk and Sq > Sk, GQA 1, 2, 4.
SHAPES = [(1, 1, 1, 1, 1, 32), (2, 2, 2, 17, 17, 64), (1, 4, 2, 65, 33, 32),
          (1, 2, 1, 3, 100, 96), (1, 4, 1, 100, 7, 128), (2, 2, 1, 40, 70, 64)]


def leaves(shape, device, dtype=torch.float32, seed=0):
    b, h, hkv, sq, sk, d = shape
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype).to(device).requires_grad_()
            for s in ((b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, d))]


def reference_grads(q, k, v, do, opts):
    """Autograd of the float64 reference."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    opts = {key: (val.double() if torch.is_tensor(val) and val.is_floating_point()
                  else val)
            for key, val in opts.items()}
    o = ab.attention_reference(q, k, v, **opts)
    return torch.autograd.grad(o, (q, k, v), do.double())


def kernel_grads(q, k, v, do, opts, step=2):
    """Gradients through step ``step`` of the forward, whose backward is the same step
    of chapter 11's kernels."""
    o = ab.flash_attention_fp32(q, k, v, step=step, **opts)
    return torch.autograd.grad(o, (q, k, v), do)


@pytest.mark.parametrize("shape", SHAPES)
def test_algorithm_2_matches_autograd(shape):
    q, k, v = leaves(shape, "cpu", torch.float64)
    b, h, _, sq, sk, _ = shape
    for _, opts, _ in ab.masks.cases(b, h, sq, sk, dtype=torch.float64):
        o = attention_tiles_autograd(q, k, v, block_q=7, block_k=5, **opts)
        do = torch.randn_like(o)
        got = torch.autograd.grad(o, (q, k, v), do)
        for a, b in zip(got, reference_grads(q, k, v, do, opts)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("opts", [dict(is_causal=True), dict(window=3, stride=2),
                                  dict(key_lengths=torch.tensor([9, 4]))])
def test_gradcheck_of_the_tiled_backward(opts):
    q, k, v = leaves((2, 4, 2, 6, 9, 8), "cpu", torch.float64, seed=1)
    assert torch.autograd.gradcheck(
        lambda q, k, v: attention_tiles_autograd(q, k, v, block_q=4, block_k=3, **opts),
        (q, k, v))


def test_algorithm_2_gradient_of_the_log_sum_exp():
    q, k, v = leaves((1, 2, 2, 5, 7, 8), "cpu", torch.float64, seed=2)
    o, lse = ab.attention_reference(q, k, v, is_causal=True, return_lse=True)
    do, dlse = torch.randn_like(o), torch.randn_like(lse)
    want = torch.autograd.grad((o, lse), (q, k, v), (do, dlse))
    got = flash_backward_tiles(q, k, v, o, lse, do, is_causal=True, dlse=dlse,
                               block_q=2, block_k=3)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


# Step 2 (ab.attention's) under every order, step 1 under one.
@pytest.mark.parametrize("shape,order,step",
                         [(s, o, 2) for s, o in itertools.product(SHAPES, ORDERS)]
                         + [(s, ORDERS[2], 1) for s in SHAPES])
def test_kernel_gradients_every_mask(shape, order, step, device):
    q, k, v = leaves(shape, device, seed=3)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(4)).to(device)
    b, h, _, sq, sk, _ = shape
    for name, opts, _ in ab.masks.cases(b, h, sq, sk, device=device):
        with ab.thread_order(*order):
            got = kernel_grads(q, k, v, do, opts, step)
        for what, a, b in zip("qkv", got, reference_grads(q, k, v, do, opts)):
            torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=2e-5,
                                       msg=lambda m: f"d{what}, {name}: {m}")


def test_gradient_of_the_log_sum_exp(device):
    q, k, v = leaves((2, 4, 2, 30, 45, 64), device, seed=5)
    o, lse = ab.flash_attention_fp32(q, k, v, is_causal=True, return_lse=True)
    weights = torch.linspace(-1, 1, 30, device=device)
    loss = (o * o).sum() + (lse * weights).sum()
    got = torch.autograd.grad(loss, (q, k, v))
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ro, rlse = ab.attention_reference(qd, kd, vd, is_causal=True, return_lse=True)
    rloss = (ro * ro).sum() + (rlse * weights.double()).sum()
    for a, b in zip(got, torch.autograd.grad(rloss, (qd, kd, vd))):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("step", [1, 2])
def test_bit_for_bit_reproducible_in_any_thread_order(step, device):
    q, k, v = leaves((2, 4, 1, 70, 90, 64), device, seed=6)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(7)).to(device)
    runs = []
    for order in ORDERS + [("forward", 0)]:
        with ab.thread_order(*order):
            runs.append(kernel_grads(q, k, v, do, dict(is_causal=True), step))
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(run, runs[0]))


@pytest.mark.parametrize("d,step", [(32, 1), (64, 1), (128, 2)])
def test_attention_runs_the_fastest_backward_step(d, step):
    """ab.attention's float32 backward: step 1 up to d = 64 (measured faster there on
    the H200), step 2 above; flash_attention_fp32(step=s) for s = 1, 2 keeps its own."""
    from attnbook.ops import backward
    q, k, v = leaves((1, 2, 2, 9, 9, d), "cpu", seed=3)
    with mock.patch.object(backward, "flash_backward",
                           wraps=backward.flash_backward) as op:
        ab.attention(q, k, v, is_causal=True).sum().backward()
        for s in (1, 2):
            ab.flash_attention_fp32(q, k, v, step=s).sum().backward()
    assert [c.args[-1] for c in op.call_args_list] == [step, 1, 2]


def test_attention_backward_and_strided_layouts(device):
    """ab.attention(...).sum().backward() reaches the caller's [B, S, H, D] views."""
    x = torch.randn(2, 19, 3 * 4 * 32).to(device).requires_grad_()
    q, k, v = (t.view(2, 19, 4, 32).transpose(1, 2) for t in x.chunk(3, -1))
    ab.attention(q, k, v, is_causal=True).square().sum().backward()
    xd = x.detach().double().requires_grad_()
    qd, kd, vd = (t.view(2, 19, 4, 32).transpose(1, 2) for t in xd.chunk(3, -1))
    ab.attention_reference(qd, kd, vd, is_causal=True).square().sum().backward()
    torch.testing.assert_close(x.grad.double(), xd.grad, rtol=1e-4, atol=2e-5)


def test_masked_keys_and_empty_rows_get_no_gradient(device):
    # causal: rows 0-69 see no key
    q, k, v = leaves((1, 2, 2, 80, 10, 32), device, seed=8)
    with torch.no_grad():
        v[:, :, 5] = float("nan")                     # masked for rows < 75 only
    o = ab.flash_attention_fp32(q, k, v, is_causal=True,
                                key_lengths=torch.tensor([5], device=device))
    dq, dk, dv = torch.autograd.grad(o.sum(), (q, k, v))
    assert (dq[:, :, :70] == 0).all() and torch.isfinite(dq).all()
    assert (dk[:, :, 5:] == 0).all() and (dv[:, :, 5:] == 0).all()   # past the length


def test_torch_compile_backward(device):
    torch._dynamo.reset()
    q, k, v = leaves((2, 4, 2, 33, 40, 32), device, seed=9)

    def loss(q, k, v):
        return ab.attention(q * 2, k, v, is_causal=True, enable_gqa=True).relu().sum()

    want = torch.autograd.grad(loss(q, k, v), (q, k, v))
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    assert all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.stack_independent
def test_more_than_65535_heads(device):
    q = torch.randn(65537, 1, 1, 32).to(device).requires_grad_()
    # 65,537 blocks: about a minute on the emulator, more on busy cores
    with ab.time_budget(900):
        dq, = torch.autograd.grad(ab.attention(q, q, q).sum(), (q,))
    assert torch.allclose(dq, torch.ones_like(dq))     # one key: o = v = q


def test_empty_inputs(device):
    q, k = (torch.randn(1, 2, 5, 32).to(device).requires_grad_(),
            torch.randn(1, 2, 0, 32).to(device).requires_grad_())
    dq, dk = torch.autograd.grad(ab.attention(q, k, k).sum(), (q, k))
    assert (dq == 0).all() and dk.shape == k.shape


def test_a_mask_that_requires_grad_is_refused(device):
    q, k, v = leaves((1, 2, 2, 5, 6, 32), device)
    mask = torch.zeros(5, 6, device=device, requires_grad=True)
    with pytest.raises(NotImplementedError, match="attn_mask requires grad"):
        ab.attention(q, k, v, attn_mask=mask)
    with torch.no_grad():
        ab.attention(q, k, v, attn_mask=mask)
    ab.attention(q, k, v, attn_mask=mask.detach()).sum().backward()
    assert q.grad is not None
