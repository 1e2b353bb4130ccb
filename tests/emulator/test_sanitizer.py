"""The emulator's hang guard: a launch that makes no progress, one past its time budget,
or one interrupted, stops with an exception naming the kernel and the threads left, and
the next launch works; a long launch that progresses runs to its end."""
import os
import subprocess
import sys
import time

import pytest
import torch

import attnbook as ab

SOURCE = r"""
// No barrier, no memory access: only the watchdog's signal can stop it.
__global__ void spin_forever(float* out) {
  while (true) {}
  out[0] = 1.f;
}

// Warp 0 waits for a flag that only warp 1 would set, after warp 0 is done: fibers
// never preempt each other, so warp 1 never runs.
__global__ void spin_on_flag(float* out) {
  __shared__ volatile int flag;
  if (threadIdx.x == 0) flag = 0;
  __syncthreads();
  if (threadIdx.x < 32) {
    while (flag == 0) {}
  } else {
    flag = 1;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.f;
}

// Nearly all its time in printf (libc): caught once a signal finds it back in kernel
// code, which takes from a fraction of a second (to a pipe) to half a minute (to a
// file, as under pytest's capture): not tested.
__global__ void chatty(float* out) {
  for (int i = 0;; ++i) printf("%d\n", i);
}

__global__ void fill(float* out, float value) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = value;
}

// Many short blocks: a long launch whose blocks keep finishing.
__global__ void busy(float* out, int iters) {
  float x = threadIdx.x;
  for (int i = 0; i < iters; ++i) x = x * 0.999f + 1.f;
  if (x < 0.f) out[0] = x;   // never: keeps the loop
}

void launch_hang(int which, float* out) {
  if (which == 0) spin_forever<<<4, 64>>>(out);
  else if (which == 1) spin_on_flag<<<4, 64>>>(out);
  else chatty<<<2, 32>>>(out);
}
void launch_fill(float* out, float value) { fill<<<4, 64>>>(out, value); }
void launch_busy(float* out, int blocks, int iters) {
  busy<<<blocks, 32>>>(out, iters);
}
"""

WRAPPER = r"""
void launch_hang(int, float*);
void launch_fill(float*, float);
void launch_busy(float*, int, int);
void run_busy(at::Tensor out, int64_t blocks, int64_t iters) {
  launch_busy(out.data_ptr<float>(), int(blocks), int(iters));
}
void run_hang(int64_t which, at::Tensor out) {
  launch_hang(int(which), out.data_ptr<float>());
}
void run_fill(at::Tensor out, double value) {
  launch_fill(out.data_ptr<float>(), float(value));
}
"""


@pytest.fixture(scope="module")
def ext():
    return ab.compile("sanitizer_hang", SOURCE, WRAPPER,
                      ["run_hang", "run_fill", "run_busy"], backend="emulator")


def fill_works(ext):
    out = torch.zeros(256)
    ext.run_fill(out, 3.0)
    assert torch.all(out == 3.0)


@pytest.mark.parametrize("which, kernel", [(0, "spin_forever"), (1, "spin_on_flag")])
@pytest.mark.parametrize("n", [1, 2])
def test_time_budget_stops_a_hang(ext, which, kernel, n):
    out = torch.zeros(256)
    start = time.perf_counter()
    with ab.workers(n), ab.time_budget(0.3):
        with pytest.raises(ab.KernelTimeout) as info:
            ext.run_hang(which, out)
    assert time.perf_counter() - start < 5
    msg = str(info.value)
    assert f"kernel '{kernel}' ran past its time budget" in msg
    assert "block (0,0,0): " in msg and "threads had not finished" in msg
    assert "(0,0,0)" in msg
    assert isinstance(info.value, RuntimeError)
    fill_works(ext)


@pytest.mark.parametrize("which, kernel", [(0, "spin_forever"), (1, "spin_on_flag")])
def test_without_a_budget_a_launch_that_makes_no_progress_is_stopped(ext, which,
                                                                     kernel,
                                                                     monkeypatch):
    monkeypatch.setenv("ATTNBOOK_EMU_STALL", "0.3")   # 60 s by default
    with pytest.raises(ab.KernelTimeout) as info:
        ext.run_hang(which, torch.zeros(256))
    assert f"kernel '{kernel}' made no progress for 0.3 s (no thread passed a " \
           "barrier or finished: a hang)" in str(info.value)
    fill_works(ext)


def test_a_long_launch_that_progresses_runs_to_its_end(ext, monkeypatch):
    """70,000 blocks of attention stopped at the 60 s budget on two busy cores, all
    progressing: the guard now stops launches that make no progress, not long ones."""
    monkeypatch.setenv("ATTNBOOK_EMU_STALL", "0.1")
    start = time.perf_counter()
    ext.run_busy(torch.zeros(1), 10000, 2000)
    assert time.perf_counter() - start > 0.3   # three times the stall guard's 0.1 s


def test_time_budget_stops_a_hang_in_checked_mode(ext):
    # spin_on_flag reads shared memory in its loop: the signal may land in the checked
    # build's access hooks, which are the extension's own code too.
    with ab.sanitize(), ab.time_budget(0.3):
        with pytest.raises(ab.KernelTimeout, match="spin_on_flag"):
            ext.run_hang(1, torch.zeros(256))
        fill_works(ext)


def test_time_budget_from_environment(ext, monkeypatch):
    monkeypatch.setenv("ATTNBOOK_EMU_TIMEOUT", "0.2")
    with pytest.raises(ab.KernelTimeout):
        ext.run_hang(0, torch.zeros(256))
    monkeypatch.setenv("ATTNBOOK_EMU_TIMEOUT", "soon")
    with pytest.raises(RuntimeError, match="ATTNBOOK_EMU_TIMEOUT"):
        ext.run_fill(torch.zeros(256), 1.0)
    monkeypatch.delenv("ATTNBOOK_EMU_TIMEOUT")
    fill_works(ext)


def test_time_budget_rejects_bad_values():
    for bad in (-1, "1", True, float("nan")):
        with pytest.raises(ValueError):
            with ab.time_budget(bad):
                pass
    with ab.time_budget(None):
        assert os.environ["ATTNBOOK_EMU_TIMEOUT"] == "0.0"


@pytest.mark.parametrize("which", [0, 1])
def test_interrupt_stops_a_hang(ext, which):
    # The launch holds the GIL, so the SIGINT comes from another process, as Jupyter's
    # interrupt does.
    killer = subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -INT {os.getpid()}"])
    start = time.perf_counter()
    try:
        with ab.time_budget(0):
            with pytest.raises(KeyboardInterrupt) as info:
                ext.run_hang(which, torch.zeros(256))
    finally:
        killer.wait()
    assert time.perf_counter() - start < 2.0
    assert isinstance(info.value, ab.KernelInterrupted)
    assert "was interrupted" in str(info.value)
    fill_works(ext)


def test_plain_launches_unaffected(ext):
    with ab.time_budget(0.5):
        for _ in range(50):
            fill_works(ext)


STATIC_SOURCE = r"""
// 40 KB + 12 KB of static shared memory: over CUDA's 48 KB per block.
__global__ void too_much_static(float* out) {
  __shared__ float a[10 * 1024];
  __shared__ float b[3 * 1024];
  a[threadIdx.x] = 1.f;
  b[threadIdx.x] = 2.f;
  __syncthreads();
  out[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}
// Exactly 48 KB: allowed.
__global__ void just_enough_static(float* out) {
  __shared__ float a[12 * 1024];
  a[threadIdx.x] = 1.f;
  __syncthreads();
  out[threadIdx.x] = a[threadIdx.x];
}
void launch_static(int which, float* out) {
  if (which == 0) too_much_static<<<2, 32>>>(out);
  else just_enough_static<<<2, 32>>>(out);
}
"""

STATIC_WRAPPER = r"""
void launch_static(int, float*);
void run_static(int64_t which, at::Tensor out) {
  launch_static(int(which), out.data_ptr<float>());
}
"""


def test_static_shared_over_48_kb_fails():
    ext = ab.compile("sanitizer_static", STATIC_SOURCE, STATIC_WRAPPER, ["run_static"],
                     backend="emulator")
    out = torch.zeros(32)
    with pytest.raises(RuntimeError, match=r"too_much_static.*53248 bytes.*49152"):
        ext.run_static(0, out)
    ext.run_static(1, out)
    assert torch.all(out == 1.0)
