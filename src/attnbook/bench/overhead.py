"""Host-side cost of one ``ab.attention`` call: the Python checks, the registered op's
dispatch and the wrapper, with the kernel's own time taken out.

    python -m attnbook.bench.overhead

Times, on tiny inputs (B = H = 1, S = 1, D = 32) where the kernel is nearly free, the
median of many calls of: the extension's own function called directly (kernel + pybind),
the registered op (``torch.ops.attnbook.flash_forward``), and ``ab.attention``. The
differences are the costs of the layers above the extension. On the CPU the kernel runs
on the emulator; on a GPU the calls are asynchronous, so the figures are launch-side
costs.
"""
from __future__ import annotations


import torch

from ..ops import attention
from ..ops.flash import FLASH_FP32_FASTEST, FLASH_FP32_TILES, flash_forward
from ..ops.registry import extension
from .emulator_speed import timed


def _median_us(fn) -> float:
    return timed(fn, repeats=2000, warmup=50)[1] * 1e6


def measure(device="cpu") -> dict:
    q = torch.randn(1, 1, 1, 32, device=device)
    none = q.new_empty(0)
    ext = extension("flash_fp32").module(q.device)
    args = ([0, 0, 0], 32 ** -0.5, FLASH_FP32_FASTEST,
            *FLASH_FP32_TILES[FLASH_FP32_FASTEST])
    return {
        "extension function (kernel + pybind)": _median_us(
            lambda: ext.flash_forward(q, q, q, none, none, *args)),
        "registered op": _median_us(lambda: flash_forward(q, q, q, None, None, *args)),
        "ab.attention": _median_us(lambda: attention(q, q, q)),
    }


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = measure(device)
    base = rows["extension function (kernel + pybind)"]
    print(f"per call, median of 2000, {device}, torch {torch.__version__}")
    for name, us in rows.items():
        print(f"{name:40s} {us:8.1f} µs   (+{us - base:6.1f} µs over the extension)")


if __name__ == "__main__":
    main()
