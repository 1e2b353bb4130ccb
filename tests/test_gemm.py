"""Chapter 4's GEMM steps against float64 matmul, both layouts, under every thread
order."""
import itertools

import pytest
import torch

import attnbook as ab

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 7)]
# (batch, M, N, K): 1×1×1; sizes off every tile (16 and 64); K not a multiple of 4
# (scalar loads) and a multiple of 4 (float4 loads); M or N bigger than one 64×64 tile;
# empty K.
SHAPES = [(1, 1, 1, 1), (2, 17, 33, 7), (1, 64, 64, 16), (3, 70, 65, 40),
          (1, 5, 132, 64), (1, 3, 4, 0)]


@pytest.mark.parametrize("step,shape,transpose_b,order",
                         list(itertools.product(ab.GEMM_STEPS, SHAPES, [False, True],
                                                ORDERS)))
def test_gemm_matches_matmul(step, shape, transpose_b, order, device):
    batch, m, n, k = shape
    g = torch.Generator().manual_seed(step)
    a = torch.randn(batch, m, k, generator=g).to(device)
    b = torch.randn(batch, *((n, k) if transpose_b else (k, n)), generator=g).to(device)
    with ab.thread_order(*order):
        c = ab.gemm(a, b, transpose_b=transpose_b, step=step)
    want = a.double() @ (b.double().mT if transpose_b else b.double())
    torch.testing.assert_close(c.double(), want, rtol=1e-5, atol=1e-5)


def test_unbatched_and_misaligned_operands(device):
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(65, 20, generator=g).to(device),
            torch.randn(1 + 20 * 36, generator=g).to(device)[1:].view(20, 36))
    # float4 loads would be illegal: step 4 falls back
    assert b.data_ptr() % 16 != 0
    torch.testing.assert_close(ab.gemm(a, b, step=4).double(), a.double() @ b.double(),
                               rtol=1e-5, atol=1e-5)


def ones(*shape, dtype=torch.float32):
    """An operand of ones of that shape and dtype, built on the device it is given."""
    return lambda device: torch.ones(*shape, dtype=dtype, device=device)


@pytest.mark.parametrize("a,b,kwargs,err,match", [
    (ones(2, 3), ones(4, 5), {}, ValueError, "inner dimensions"),
    (ones(2, 3), ones(5, 4), dict(transpose_b=True), ValueError, "inner dimensions"),
    (ones(2, 3, dtype=torch.float16), ones(3, 2), {}, TypeError, "float32"),
    (ones(2, 2, 3), ones(3, 3, 2), {}, ValueError, "same batch"),
    (ones(2, 3), ones(3, 2), dict(step=5), ValueError, "step must be"),
    (ones(3), ones(3), {}, ValueError, r"\[M, K\]"),
])
def test_bad_inputs(a, b, kwargs, err, match, device):
    with pytest.raises(err, match=match):
        ab.gemm(a(device), b(device), **kwargs)


def test_non_contiguous_operands_are_copied(device):
    a, b = torch.randn(3, 2).to(device).t(), torch.randn(5, 6).to(device)[:, ::2].t()
    for step in ab.GEMM_STEPS:
        torch.testing.assert_close(ab.gemm(a, b, step=step), a @ b, rtol=1e-5,
                                   atol=1e-6)
