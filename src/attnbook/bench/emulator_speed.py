"""``python -m attnbook.bench.emulator_speed [repeats]``: how fast the CPU emulator runs
kernels.

Prints the cost of the emulator's own machinery (a thread at a ``__syncthreads``, a
lane at a warp shuffle, a thread of a kernel without any synchronisation) and the time
of three whole kernels (a shared-memory tree reduction and a warp-shuffle reduction over
4096 blocks of 256 threads, and the package's fp32 flash forward at B=1, H=4, S=256,
D=64), with one worker and with one worker per core; and what a call of a reader's
module adds by default, its tensors copied between guard pages
(:mod:`cuda_emulator.guard`), per thread of the barrier-free kernel, whose one
float per thread is copied in and out. Each figure is the best and the
median of ``repeats`` runs (7 by default), wall-clock: on a machine shared with other
work, compare the best ones.
"""
from __future__ import annotations

import os
import pathlib
import statistics
import sys
import time

import torch
from cuda_emulator import guard, workers

from ..ops import attention
from ..toolchain.compile import compile as compile_kernels

HERE = pathlib.Path(__file__).resolve().parent
THREADS = 256
BLOCKS = 4096


def core_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def timed(fn, repeats: int, warmup: int = 1) -> tuple[float, float]:
    """Best and median seconds of ``repeats`` calls of ``fn``, after ``warmup``
    calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def measure(repeats: int = 7) -> list[tuple[str, str, int, float, float]]:
    """Rows of (what, unit, workers, best, median)."""
    ext = compile_kernels("emulator_speed", (HERE / "emulator_speed.cu").read_text(),
                          (HERE / "emulator_speed_wrapper.cpp").read_text(),
                          ["loop", "reduce"], backend="emulator", guard_memory=False)
    loop = ext.loop.__wrapped__   # the extension's function, for a guarded call
    x = torch.rand(BLOCKS * THREADS)
    sums = torch.empty(BLOCKS)
    q, k, v = (torch.randn(1, 4, 256, 64) for _ in range(3))
    per_thread = [   # what, unit, blocks, reps, barrier (or shuffle)
        ("barrier", "ns per thread-barrier", 256, 64, True),
        ("shuffle", "ns per lane-shuffle", 256, 32, False),
        ("barrier-free", "ns per thread", BLOCKS, 0, True),
    ]
    rows = []
    for n in sorted({1, core_count()}):
        with workers(n):
            for what, unit, blocks, reps, barrier in per_thread:
                out = torch.empty(blocks * THREADS)
                count = out.numel() * max(reps, 1) / 1e9
                best, median = timed(lambda: ext.loop(barrier, reps, out), repeats)
                if reps:
                    base = timed(lambda: ext.loop(barrier, 0, out), repeats)
                    best, median = best - base[0], median - base[1]
                rows.append((what, unit, n, best / count, median / count))
                if not reps:   # the same launch as a reader's module makes it
                    guarded = timed(lambda: guard.guarded_call(
                        loop, ext.__file__, (barrier, 0, out), {}), repeats)
                    rows.append(("guarded call, barrier-free", unit, n,
                                 guarded[0] / count, guarded[1] / count))
            for tree in (True, False):
                best, median = timed(lambda: ext.reduce(tree, x, sums), repeats)
                what = f"{'tree' if tree else 'shuffle'} reduction {BLOCKS}x{THREADS}"
                rows.append((what, "ms", n, best * 1e3, median * 1e3))
            best, median = timed(lambda: attention(q, k, v), repeats)
            rows.append(("flash fp32 1x4x256x64", "ms", n, best * 1e3, median * 1e3))
    return rows


def main(argv=()):
    repeats = int(argv[0]) if argv else 7
    rows = measure(repeats)
    print(f"\nCPU emulator, {core_count()} cores; best / median of {repeats} runs")
    print(f"{'':28}{'unit':>24}{'workers':>9}{'best':>9}{'median':>9}")
    for what, unit, n, best, median in rows:
        print(f"{what:28}{unit:>24}{n:>9}{best:>9.1f}{median:>9.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
