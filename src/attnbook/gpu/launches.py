"""Every kernel of the package, launched once at a small shape: the list that the
emulator's sanitizer test (``tests/test_sanitize_package.py``), compute-sanitizer and
Nsight Compute (``python -m attnbook.gpu``) all run.

    python -m attnbook.gpu.launches [--device cuda] [--only NAME ...] [--list]

runs them (each a name and a function of the device that returns the output) and
exits 0; under ``compute-sanitizer`` or ``ncu`` it is the program they watch. Shapes
are off every tile (odd lengths, Sq ≠ Sk, grouped heads) so that edge code runs too.
"""
from __future__ import annotations

import argparse
import sys

import torch

from .. import ops

__all__ = ["LAUNCHES", "main"]


def _randn(device, *shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)   # the same values on every device
    return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)


def _qkv(device, b, h, sq, sk, d, dtype=torch.float32):
    """q [b, h, sq, d] and k, v [b, h/2, sk, d]: two query heads per key head."""
    return (_randn(device, b, h, sq, d, dtype=dtype, seed=1),
            _randn(device, b, h // 2, sk, d, dtype=dtype, seed=2),
            _randn(device, b, h // 2, sk, d, dtype=dtype, seed=3))


def _decode(device, paged, d=32, dtype=torch.float32):
    """One decode step of 4 query heads on 2 kv heads against 37 and 5 keys: the
    fp32 step at d 32; at fp16/bf16 and d 64 or 128 the tensor-core step."""
    q = _randn(device, 2, 4, 1, d, dtype=dtype, seed=4)
    k, v = (_randn(device, 2, 2, 1, d, dtype=dtype, seed=s) for s in (5, 6))
    lengths = torch.tensor([37, 5], dtype=torch.int32, device=device)
    if not paged:
        kc = _randn(device, 2, 2, 48, d, dtype=dtype, seed=7)
        vc = _randn(device, 2, 2, 48, d, dtype=dtype, seed=8)
        return ops.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lengths,
                                          num_splits=2)
    kc, vc = (_randn(device, 7, 2, 8, d, dtype=dtype, seed=s) for s in (7, 8))
    table = torch.tensor([[3, 0, 6, 1, 5], [2, 4, 4, 4, 4]], dtype=torch.int32,
                         device=device)
    return ops.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lengths,
                                      block_table=table)


def _backward(device, forward, d=32, dtype=torch.float32):
    """dq, dk and dv, flattened, of forward(q, k, v).sum()."""
    q, k, v = (t.requires_grad_() for t in _qkv(device, 1, 2, 19, 23, d, dtype))
    forward(q, k, v).float().sum().backward()
    return torch.cat([t.grad.flatten() for t in (q, k, v)])


LAUNCHES = {
    "flash fp32 step 1": lambda dev: ops.flash_attention_fp32(
        *_qkv(dev, 1, 4, 21, 33, 64), is_causal=True, step=1),
    **{f"flash fp32 step {s}": (lambda dev, s=s: ops.flash_attention_fp32(
        *_qkv(dev, 1, 2, 70, 90, 64), is_causal=True, step=s)) for s in (2, 3)},
    "flash fp32 step 3, masked": lambda dev: ops.flash_attention_fp32(
        *_qkv(dev, 2, 2, 70, 90, 64), step=3, is_causal=True, stride=3,
        key_lengths=torch.tensor([90, 33], device=dev)),
    "flash fp32 step 2, masked": lambda dev: ops.flash_attention_fp32(
        *_qkv(dev, 2, 2, 9, 70, 32), step=2, stride=3, window=40,
        key_lengths=torch.tensor([70, 33], device=dev)),
    "tiled, strided": lambda dev: ops.attention(
        *_qkv(dev, 2, 2, 9, 17, 24), stride=3,
        key_lengths=torch.tensor([17, 6], device=dev), impl="tiled", enable_gqa=True),
    "naive": lambda dev: ops.attention(*_qkv(dev, 1, 2, 5, 7, 8), impl="naive",
                                       enable_gqa=True),
    **{f"tensor cores step {s}": (lambda dev, s=s: ops.flash_attention_tc(
        *_qkv(dev, 1, 2, 40, 70, 64, torch.float16), is_causal=True, step=s))
       for s in ops.TC_STEPS},
    # step 6's unmasked loop needs whole 128-key tiles (D 64)
    "tensor cores step 6, whole tiles": lambda dev: ops.flash_attention_tc(
        *_qkv(dev, 1, 2, 130, 300, 64, torch.float16), is_causal=True, step=6),
    "tensor cores bf16": lambda dev: ops.flash_attention_tc(
        *_qkv(dev, 1, 2, 17, 17, 128, torch.bfloat16), step=5),
    **{f"softmax {n}": (lambda dev, n=n: ops.softmax(_randn(dev, 3, 77), n))
       for n in ops.SOFTMAX_KERNELS},
    **{f"gemm step {s}": (lambda dev, s=s: ops.gemm(_randn(dev, 33, 20),
                                                    _randn(dev, 20, 45), step=s))
       for s in ops.GEMM_STEPS},
    "decode, split-K": lambda dev: _decode(dev, False),
    "decode, paged": lambda dev: _decode(dev, True),
    "decode, tensor cores, split-K": lambda dev: _decode(dev, False, 64,
                                                          torch.float16),
    "decode, tensor cores, paged": lambda dev: _decode(dev, True, 128,
                                                        torch.bfloat16),
    **{f"backward step {s}": (lambda dev, s=s: _backward(
        dev, lambda q, k, v: ops.flash_attention_fp32(q, k, v, is_causal=True, step=s)))
       for s in (1, 2)},
    **{f"tensor cores backward {n}": (lambda dev, d=d, t=t: _backward(
        dev, lambda q, k, v: ops.attention(q, k, v, is_causal=True, enable_gqa=True),
        d, t))
       for n, d, t in (("fp16", 64, torch.float16), ("bf16", 128, torch.bfloat16))},
    # chapter 12's: sm_90a code, the emulator's or an H100's/H200's
    # causal with Sk - Sq = 80: each block has unmasked tiles and masked ones
    **{f"hopper step {s}": (lambda dev, s=s: ops.flash_attention_hopper(
        *_qkv(dev, 1, 2, 70, 150, 64, torch.float16), is_causal=True, step=s))
       for s in ops.HOPPER_STEPS},
    "hopper bf16": lambda dev: ops.flash_attention_hopper(
        *_qkv(dev, 1, 2, 17, 70, 128, torch.bfloat16), step=1),
    "tensor cores backward step 1": lambda dev: _backward(
        dev, lambda q, k, v: ops.flash_attention_tc(
            q, k, v, is_causal=True, backward_step=1), 64, torch.float16),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook.gpu.launches",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=list(LAUNCHES),
                        help="these launches only (default: every one)")
    parser.add_argument("--list", action="store_true", help="print the names and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(LAUNCHES))
        return 0
    for name in args.only or LAUNCHES:
        out = LAUNCHES[name](args.device)
        if out.device.type == "cuda":
            torch.cuda.synchronize()
        print(f"{name}: {tuple(out.shape)} {out.dtype}, finite: "
              f"{bool(torch.isfinite(out).all())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
