"""``python -m attnbook.bench.emulator_speed [repeats]``: how fast the CPU emulator runs
kernels.

Prints the cost of the emulator's own machinery (a thread at a ``__syncthreads``, a
lane at a warp shuffle, a thread of a kernel without any synchronisation) and the time
of three whole kernels (a shared-memory tree reduction and a warp-shuffle reduction over
4096 blocks of 256 threads, and the package's fp32 flash forward at B=1, H=4, S=256,
D=64), with one worker and with one worker per core. Each figure is the best and the
median of ``repeats`` runs (7 by default), wall-clock: on a machine shared with other
work, compare the best ones.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import torch

from ..ops import attention
from ..toolchain import emulator
from ..toolchain.compile import compile as compile_kernels

SOURCE = r"""
// `reps` barriers per thread: the time above that of reps = 0 is reps thread-barriers.
__global__ void barriers(int reps, float* out) {
  for (int i = 0; i < reps; ++i) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.f;
}

// `reps` shuffles per lane.
__global__ void shuffles(int reps, float* out) {
  float v = threadIdx.x;
  for (int i = 0; i < reps; ++i) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void tree_sum(const float* x, float* out) {
  __shared__ float s[256];
  int t = threadIdx.x;
  s[t] = x[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

__device__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

__global__ void shuffle_sum(const float* x, float* out) {
  __shared__ float partial[32];
  int t = threadIdx.x, lane = t % 32, warp = t / 32;
  float v = warp_sum(x[blockIdx.x * blockDim.x + t]);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = warp_sum(lane < blockDim.x / 32 ? partial[lane] : 0.f);   // every warp, alike
  if (t == 0) out[blockIdx.x] = v;
}

void launch_loop(bool barrier, int blocks, int reps, float* out) {
  if (barrier) barriers<<<blocks, 256>>>(reps, out);
  else shuffles<<<blocks, 256>>>(reps, out);
}

void launch_reduce(bool tree, int blocks, const float* x, float* out) {
  if (tree) tree_sum<<<blocks, 256>>>(x, out);
  else shuffle_sum<<<blocks, 256>>>(x, out);
}
"""

WRAPPER = r"""
void launch_loop(bool, int, int, float*);
void launch_reduce(bool, int, const float*, float*);

void loop(bool barrier, int64_t reps, at::Tensor out) {
  launch_loop(barrier, out.numel() / 256, reps, out.data_ptr<float>());
}

void reduce(bool tree, at::Tensor x, at::Tensor out) {
  launch_reduce(tree, out.numel(), x.data_ptr<float>(), out.data_ptr<float>());
}
"""

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
    ext = compile_kernels("emulator_speed", SOURCE, WRAPPER, ["loop", "reduce"],
                          backend="emulator")
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
        with emulator.workers(n):
            for what, unit, blocks, reps, barrier in per_thread:
                out = torch.empty(blocks * THREADS)
                count = out.numel() * max(reps, 1) / 1e9
                best, median = timed(lambda: ext.loop(barrier, reps, out), repeats)
                if reps:
                    base = timed(lambda: ext.loop(barrier, 0, out), repeats)
                    best, median = best - base[0], median - base[1]
                rows.append((what, unit, n, best / count, median / count))
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
