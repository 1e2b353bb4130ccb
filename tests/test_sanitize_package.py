"""Every kernel of the package runs clean under the checked build (memcheck and
racecheck) in each of the emulator's thread orders, and computes what the plain build
computes."""
import pytest
import torch

import attnbook as ab
from attnbook.toolchain.emulator import ORDERS


def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _qkv(b, h, sq, sk, d, dtype=torch.float32):
    return (_randn(b, h, sq, d, dtype=dtype, seed=1),
            _randn(b, h // 2, sk, d, dtype=dtype, seed=2),
            _randn(b, h // 2, sk, d, dtype=dtype, seed=3))


def _decode(paged):
    q = _randn(2, 4, 1, 32, seed=4)
    k, v = _randn(2, 2, 1, 32, seed=5), _randn(2, 2, 1, 32, seed=6)
    lengths = torch.tensor([37, 5], dtype=torch.int32)
    if not paged:
        kc, vc = _randn(2, 2, 48, 32, seed=7), _randn(2, 2, 48, 32, seed=8)
        return ab.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lengths,
                                         num_splits=2)
    kc, vc = _randn(7, 2, 8, 32, seed=7), _randn(7, 2, 8, 32, seed=8)
    table = torch.tensor([[3, 0, 6, 1, 5], [2, 4, 4, 4, 4]], dtype=torch.int32)
    return ab.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lengths,
                                     block_table=table)


def _backward():
    q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 19, 23, 32))
    ab.attention(q, k, v, is_causal=True).sum().backward()
    return torch.cat([t.grad.flatten() for t in (q, k, v)])


CALLS = {
    "flash fp32": lambda: ab.attention(*_qkv(1, 4, 21, 33, 64), is_causal=True),
    "tiled, strided": lambda: ab.attention(*_qkv(2, 2, 9, 17, 24), stride=3,
                                           key_lengths=torch.tensor([17, 6]),
                                           impl="tiled"),
    "naive": lambda: ab.attention(*_qkv(1, 2, 5, 7, 8), impl="naive"),
    **{f"tensor cores step {s}": (lambda s=s: ab.flash_attention_tc(
        *_qkv(1, 2, 40, 70, 64, torch.float16), is_causal=True, step=s))
       for s in ab.TC_STEPS},
    "tensor cores bf16": lambda: ab.flash_attention_tc(
        *_qkv(1, 2, 17, 17, 128, torch.bfloat16), step=5),
    **{f"softmax {n}": (lambda n=n: ab.softmax(_randn(3, 77), n))
       for n in ab.SOFTMAX_KERNELS},
    **{f"gemm step {s}": (lambda s=s: ab.gemm(_randn(33, 20), _randn(20, 45), step=s))
       for s in ab.GEMM_STEPS},
    "decode, split-K": lambda: _decode(False),
    "decode, paged": lambda: _decode(True),
    "backward": _backward,
}


@pytest.mark.parametrize("name", list(CALLS))
def test_package_kernel_is_clean_in_every_order(name):
    for order in ORDERS:
        with ab.thread_order(order, seed=3):
            plain = CALLS[name]()
            with ab.sanitize():
                checked = CALLS[name]()
        torch.testing.assert_close(checked, plain, rtol=0, atol=0)
