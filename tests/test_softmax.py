"""Chapter 3's softmax kernels against float64 torch.softmax, under every thread
order."""
import itertools

import pytest
import torch

import attnbook as ab

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 5)]
# (rows, n): one element, rows shorter than a warp, odd lengths, longer than a block,
# more rows than a block of the warp kernel holds.
SHAPES = [(1, 1), (3, 17), (6, 33), (2, 700), (9, 256)]


def rows(shape, device, seed=0, magnitude=10.0):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * magnitude
    if shape[0] > 1:
        x[1] = float("-inf")                 # a fully masked row
    if shape[0] > 2 and shape[1] > 1:
        x[2, ::2] = float("-inf")            # a partly masked row
    return x.to(device)


def expected(x):
    return torch.softmax(x.double(), -1).nan_to_num(0.0)   # fully masked rows: zeros


@pytest.mark.parametrize("kernel,shape,order",
                         list(itertools.product(ab.SOFTMAX_KERNELS, SHAPES, ORDERS)))
def test_kernel_matches_softmax(kernel, shape, order, device):
    x = rows(shape, device)
    with ab.thread_order(*order):
        y = ab.softmax(x, kernel)
    torch.testing.assert_close(y.double(), expected(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kernel", ab.SOFTMAX_KERNELS)
def test_large_magnitudes_and_batched_shapes(kernel, device):
    # exp would overflow
    x = (torch.randn(2, 3, 50, generator=torch.Generator().manual_seed(1)) * 1e4
         ).to(device)
    y = ab.softmax(x, kernel)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), expected(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kernel", ab.SOFTMAX_KERNELS)
def test_a_nan_anywhere_in_a_thread_s_elements_makes_its_row_nan(kernel, device):
    """A NaN, then −inf in the same thread (elements 0, 256 and 512 of a row of 600
    on 256 threads), beside rows of −inf: every y of the row NaN, as in torch. (A
    fold that kept the max at −inf after the NaN lost it in the merge with an empty
    state.)"""
    x = torch.full((3, 600), float("-inf"))
    x[0, 0] = x[1, 5] = float("nan")
    x[1, 300], x[2, 7] = 1.0, 2.0
    y = ab.softmax(x.to(device), kernel).cpu()
    assert y[:2].isnan().all() and torch.equal(y[2], torch.softmax(x[2], -1))


# No device: the thread orders that show the race are the emulator's.
def test_missing_barrier_would_be_caught():
    """The tree reduction's barriers matter: without the one after reading buf[0], the
    sum's first store overwrites the max before slower threads read it, and some order
    shows it."""
    src = ab.kernel_source("softmax.cuh")
    cut = ("  __syncthreads();     // everyone has read buf[0] before it is reused for "
           "the sum\n")
    assert cut in src
    launcher = ("void tree64(const float* x, float* y, int rows, int n) { "
                "softmax_block_tree<64><<<rows, 64>>>(x, y, n); }")
    wrapper = r"""
void tree64(const float*, float*, int, int);
at::Tensor run(at::Tensor x) {
  at::Tensor y = x.new_empty(x.sizes());
  tree64(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1));
  return y;
}
"""
    broken = ab.compile("softmax_no_barrier", src.replace(cut, "") + launcher, wrapper,
                        ["run"], backend="emulator")
    x = rows((4, 100), "cpu")
    results = []
    for order in ORDERS:
        with ab.thread_order(*order):
            results.append(torch.allclose(broken.run(x).double(), expected(x),
                                          rtol=1e-5, atol=1e-7))
    assert not all(results)


@pytest.mark.parametrize("x,kernel,err,match", [
    (lambda d: torch.ones(3, dtype=torch.float64, device=d), "online", TypeError,
     "float32"),
    (lambda d: torch.ones(3, device=d), "fastest", ValueError, "kernel must be one of"),
    (lambda d: [1.0, 2.0], "online", TypeError, "tensor"),
])
def test_bad_inputs(x, kernel, err, match, device):
    with pytest.raises(err, match=match):
        ab.softmax(x(device), kernel)
