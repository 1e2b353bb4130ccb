"""A wrong kernel never takes the reader's Python down: on the emulator a wild access, a
stack overflow, a division by zero or shared memory the launch did not give is a
KernelFault naming the kernel, block, thread and line (as a GPU gives a CUDA error),
Ctrl-C stops any kernel, and the same process then runs the next kernel correctly.
Most of these once killed the process, so each runs in a child process here."""
import contextlib
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import attnbook as ab

SOURCE = r"""
__device__ int depth(int n) {
  volatile int frame[8];
  frame[0] = n;
  return n ? depth(n - 1) + frame[0] : 0;
}

// Thread `who` of block `block` does what `which` says; every other thread writes its
// index, so a launch that goes on past the fault shows in `out`.
__global__ void wrong(int which, int block, int who, long long i, float* out) {
  extern __shared__ float tile[];
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (blockIdx.x != block || threadIdx.x != who) {
    out[t] = t;
    return;
  }
  if (which == 0) out[i] = 1.f;                       // far out of bounds
  if (which == 1) out[t] = out[i];
  if (which == 2) out[t] = depth(int(i));             // recursion i deep
  if (which == 3) out[t] = float(t / int(i));         // i = 0
  if (which == 4) out[t] = tile[threadIdx.x + i];     // past the launch's bytes
  if (which == 6) out[t] = float(int(i << 31) / int(i));   // i = -1: INT_MIN / -1
  if (which == 5) {                                   // 480 KiB of local memory
    volatile float local[120 * 1024];
    for (int j = 0; j < 120 * 1024; ++j) local[j] = j;
    out[t] = local[i];
  }
}

// Thread `who` writes element i of a local array of 8 (its own frame: `wrong`'s holds
// 480 KiB).
__global__ void overrun(int who, long long i, float* out) {
  volatile float local[8];
  local[0] = threadIdx.x;
  if (threadIdx.x == who) local[i] = 1.f;
  out[threadIdx.x] = local[0];
}

__global__ void fill(float* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = blockIdx.x + threadIdx.x;
}

// 2^31 - 1 blocks of one thread: CUDA's largest grid.
__global__ void tiny(float* out) {
  if (blockIdx.x == 0) out[0] = 1.f;
}

__global__ void spin(float* out) {
  volatile int x = 0;
  while (true) x = x + 1;
}

void launch_wrong(int which, int block, int who, long long i, int smem, float* out) {
  wrong<<<4, 64, smem>>>(which, block, who, i, out);
}
void launch_fill(float* out) { fill<<<4, 64>>>(out); }
void launch_overrun(int who, long long i, float* out) {
  overrun<<<1, 64>>>(who, i, out);
}
void launch_tiny(float* out) { tiny<<<2147483647, 1>>>(out); }
void launch_spin(float* out) { spin<<<4, 32>>>(out); }
"""

WRAPPER = r"""
void launch_wrong(int, int, int, long long, int, float*);
void launch_fill(float*);
void launch_overrun(int, long long, float*);
void launch_tiny(float*);
void launch_spin(float*);
void run_wrong(int64_t which, int64_t block, int64_t who, int64_t i, int64_t smem,
               at::Tensor out) {
  launch_wrong(int(which), int(block), int(who), i, int(smem), out.data_ptr<float>());
}
at::Tensor run_wrong_new(int64_t which, int64_t block, int64_t who, int64_t i,
                         int64_t n) {   // into a tensor of n floats it allocates
  at::Tensor out = at::zeros({n});
  launch_wrong(int(which), int(block), int(who), i, 0, out.data_ptr<float>());
  return out;
}
void run_fill(at::Tensor out) { launch_fill(out.data_ptr<float>()); }
void run_overrun(int64_t who, int64_t i, at::Tensor out) {
  launch_overrun(int(who), i, out.data_ptr<float>());
}
at::Tensor run_fill_then(bool fail, at::Tensor out) {   // a check after the kernel
  launch_fill(out.data_ptr<float>());
  TORCH_CHECK(!fail, "the wrapper's check after the kernel failed");
  return out;
}
void run_tiny(at::Tensor out) { launch_tiny(out.data_ptr<float>()); }
void run_spin(at::Tensor out) { launch_spin(out.data_ptr<float>()); }
"""

FUNCTIONS = ["run_wrong", "run_wrong_new", "run_fill", "run_fill_then", "run_overrun",
             "run_tiny", "run_spin"]


def build():
    return ab.compile("faults", SOURCE, WRAPPER, FUNCTIONS, backend="emulator")


@pytest.fixture(scope="module")
def ext():
    return build()


def fill_works(ext):
    out = torch.zeros(256)
    ext.run_fill(out)
    assert torch.equal(out, torch.arange(256.) // 64 + torch.arange(256.) % 64)


# The line of each case in SOURCE, as the message names it.
LINES = {n: i for i, text in enumerate(SOURCE.splitlines(), 1)
         for n in range(7) if f"if (which == {n})" in text}
# depth()'s lines: where its frame is made or its recursive call is.
DEPTH = [i for i, text in enumerate(SOURCE.splitlines(), 1) if 1 < i < 7]

# which, i, smem, the message
CASES = {
    # 4 TiB past a tensor: unmapped, or past the CPU's 47-bit addresses
    "write far out of bounds": (0, 1 << 40, 0,
                                r"illegal memory access: (a write at address 0x|an "
                                r"address outside the CPU's address space)"),
    "read far out of bounds": (1, 1 << 40, 0,
                               r"illegal memory access: (a read at address 0x|an "
                               r"address outside the CPU's address space)"),
    # out holds 256 floats: 4000 floats past its end, 1000 before its start
    "write a few KB past a tensor": (0, 256 + 4000, 0,
                                     r"a write at address 0x[0-9a-f]+ \(SIGSEGV\), "
                                     r"16000 bytes past the end of a 1024-byte tensor"),
    "read a few KB before a tensor": (1, -1000, 0,
                                      r"a read at address 0x[0-9a-f]+ \(SIGSEGV\), "
                                      r"4000 bytes before the start of a 1024-byte "
                                      r"tensor"),
    "recursion a million deep": (2, 10**6, 0,
                                 r"stack overflow: the thread used more than its "
                                 r"576 KiB of stack"),
    "integer division by zero": (3, 0, 0, r"integer division by zero \(SIGFPE"),
    "integer division overflow": (6, -1, 0, r"integer division overflow: the most "
                                            r"negative integer divided by -1 \(SIGFPE"),
    "shared memory the launch did not give": (
        4, 0, 0, r"out-of-bounds shared memory access: byte 148 of dynamic shared "
                 r"memory, of which the launch gave the block 0 bytes"),
    "shared memory past the launch's bytes": (
        4, 8192, 128, r"out-of-bounds shared memory access: byte 32\d\d\d of dynamic "
                      r"shared memory, of which the launch gave the block 128 bytes"),
    # once no fault: the emulator's own memory lay on both sides
    "shared memory before its start": (
        4, -38, 128, r"out-of-bounds shared memory access: byte -4 of dynamic shared "
                     r"memory, of which the launch gave the block 128 bytes"),
    "shared memory past the largest a GPU gives": (
        4, 59136 - 37, 128, r"out-of-bounds shared memory access: byte 236544 of "
                            r"dynamic shared memory"),
    "shared memory 4 MiB past its start": (
        4, (1 << 20) - 37, 128, r"out-of-bounds shared memory access: byte 4194304 of "
                                r"dynamic shared memory"),
}

# Run in a child: on a kernel without this guard, the fault kills the process.
CHILD = r"""
import sys, torch, attnbook as ab
sys.path.insert(0, {tests!r})
from test_faults import build, fill_works
ext = build()
for n in (1, 2):
    with ab.workers(n):
        out = torch.zeros(256)
        try:
            {call}
        except ab.KernelFault as e:
            print("KernelFault:", e)
        fill_works(ext)
        print("next launch ok")
"""


def run_child(code, timeout=120):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


def faults_in_child(call):
    """The KernelFault lines of ``call`` made in a child on 1 and on 2 workers, each
    followed by a correct launch."""
    child = run_child(CHILD.format(tests=os.path.dirname(__file__), call=call))
    assert child.returncode == 0, child.stderr[-2000:]
    faults = [ln for ln in child.stdout.splitlines() if ln.startswith("KernelFault")]
    assert len(faults) == 2, child.stdout   # one per worker count
    assert child.stdout.count("next launch ok") == 2
    return faults


@pytest.mark.parametrize("case", CASES)
def test_a_faulting_thread_is_an_exception_and_the_process_goes_on(ext, case):
    which, i, smem, message = CASES[case]
    block, who = 2, 37
    faults = faults_in_child(f"ext.run_wrong({which}, {block}, {who}, {i}, {smem}, "
                             "out)")
    for fault in faults:
        assert f"kernel 'wrong', block ({block},0,0), thread ({who},0,0): " in fault
        assert re.search(message, fault), fault
        assert f"at cell.cu:{LINES[which]}" in fault or which == 2, fault
    assert ("memcheck names the first bad access" in faults[0]) == (which in (0, 1, 4))


def test_a_write_past_a_tensor_the_wrapper_allocates_is_a_fault(ext):
    # the case: a few KB past the end of a 1000-float output
    faults = faults_in_child("ext.run_wrong_new(0, 1, 5, 1000 + 4000, 1000)")
    for fault in faults:
        assert re.search(r"kernel 'wrong', block \(1,0,0\), thread \(5,0,0\): "
                         r"illegal memory access: a write at address 0x[0-9a-f]+ "
                         r"\(SIGSEGV\), 16000 bytes past the end of a 4000-byte "
                         rf"tensor at cell.cu:{LINES[0]}", fault), fault


def test_guarded_calls_keep_views_in_place_writes_and_returned_tensors(ext):
    whole = torch.zeros(300)
    view = whole[20:276]                  # 256 floats inside a larger storage
    ext.run_fill(view)                    # written back into `whole`
    assert torch.equal(view, torch.arange(256.) // 64 + torch.arange(256.) % 64)
    assert whole[:20].eq(0).all() and whole[276:].eq(0).all()
    ext.run_wrong(0, 0, 0, -20, 0, view)  # thread 0 writes whole[0]: same storage
    assert whole[0] == 1
    out = ext.run_wrong_new(0, 3, 63, 255, 256)   # thread 255 writes 1, not 255
    assert out[255] == 1 and torch.equal(out[:255], torch.arange(255.))


@pytest.mark.parametrize("i, place", [(-1, "4 bytes before the start"),
                                      (-24, "96 bytes before the start"),
                                      (999, "0 bytes past the end")])
def test_a_write_just_beside_a_tensor_is_found_after_the_call(ext, i, place):
    # 999 floats end 4 bytes short of 16-byte alignment and start 96 bytes after a
    # page does: writes there hit no guard page; d[-1] went unnoticed
    out = torch.zeros(999)
    with pytest.raises(ab.KernelFault, match=rf"^run_wrong: a kernel wrote {place} "
                                             r"of a 3996-byte tensor \(the bytes "
                                             r"there changed during the call\); "
                                             r"ab.sanitize\(\) names the line$"):
        ext.run_wrong(0, 0, 0, i, 0, out)
    ext.run_wrong(0, 0, 0, 998, 0, out)        # the next call is clean
    assert out[998] == 1
    fill_works(ext)


def test_a_tensor_subclass_is_guarded_as_its_tensor(ext):
    faults = faults_in_child("ext.run_wrong(0, 1, 5, 256 + 4000, 0, "
                             "out.as_subclass(type('Sub', (torch.Tensor,), {})))")
    for fault in faults:
        assert "16000 bytes past the end of a 1024-byte tensor" in fault, fault
    sub = torch.zeros(256).as_subclass(type("Sub", (torch.Tensor,), {}))
    ext.run_fill(sub)
    assert torch.equal(sub.as_subclass(torch.Tensor),
                       torch.arange(256.) // 64 + torch.arange(256.) % 64)


def test_a_call_keeps_a_kernel_s_writes_when_its_wrapper_then_raises(ext):
    out = torch.zeros(256)
    with pytest.raises(RuntimeError, match="the wrapper's check after the kernel"):
        ext.run_fill_then(True, out)
    assert torch.equal(out, torch.arange(256.) // 64 + torch.arange(256.) % 64)
    assert ext.run_fill_then(False, out) is out   # as torch's loader returns it


def mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def test_torch_s_allocator_is_back_after_a_call_and_after_a_fault(ext):
    ext.run_fill(torch.zeros(256))
    with pytest.raises(ab.KernelFault):
        ext.run_wrong(0, 0, 0, 256 + 4000, 0, torch.zeros(256))
    before = mappings()
    kept = [torch.empty(1000) for _ in range(200)]   # a guarded one is a mapping each
    assert mappings() - before < 50, len(kept)


def test_a_local_array_indexed_far_past_its_end_is_named_so(ext):
    # it was named a stack overflow. Thread 0's stack ends at the next thread's guard.
    # Inside sanitize() the same fault names it: the checked build's instrumentation
    # leaves out a local array whose address never escapes.
    line = next(i for i, text in enumerate(SOURCE.splitlines(), 1)
                if "local[i] = 1.f" in text)
    message = (r"kernel 'overrun', block \(0,0,0\), thread \(0,0,0\): illegal memory "
               r"access: a write \d+ bytes above the top of the thread's stack \(a "
               rf"local array indexed past its end\) \(SIGSEGV\) at cell.cu:{line}")
    for fault in faults_in_child("ext.run_overrun(0, 4000, out)"):
        assert re.search(message, fault), fault
    with ab.sanitize(), pytest.raises(ab.KernelFault, match=message):
        ext.run_overrun(0, 4000, torch.zeros(64))


def test_the_fault_is_a_runtime_error_and_names_the_recursions_line(ext):
    with pytest.raises(RuntimeError) as info:
        ext.run_wrong(2, 0, 0, 10**6, 0, torch.zeros(256))
    assert isinstance(info.value, ab.KernelFault)
    assert any(str(info.value).endswith(f"at cell.cu:{line}") for line in DEPTH)
    fill_works(ext)


def test_local_memory_a_gpu_allows_runs(ext):
    # 480 KiB per thread: more than the emulator's old 256 KiB stack, within a GPU's
    # 512 KiB.
    out = torch.zeros(256)
    ext.run_wrong(5, 1, 3, 12345, 0, out)
    assert out[64 + 3] == 12345 and out[0] == 0 and out[255] == 255


STACK = r"""
__device__ int depth(int n) {   // at least 256 bytes of stack a level
  volatile int frame[64];
  frame[0] = n;
  return n ? depth(n - 1) + frame[0] : 0;
}
__global__ void recurse(int n, int* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = depth(n);
}

int set_stack(size_t bytes) { return cudaDeviceSetLimit(cudaLimitStackSize, bytes); }
size_t stack() {
  size_t bytes = 0;
  cudaDeviceGetLimit(&bytes, cudaLimitStackSize);
  return bytes;
}
void launch_recurse(int n, int* out) { recurse<<<2, 32>>>(n, out); }
"""
STACK_WRAPPER = r"""
int set_stack(size_t);
size_t stack();
void launch_recurse(int, int*);
int64_t set_stack_of(int64_t bytes) { return set_stack(size_t(bytes)); }
int64_t stack_of() { return int64_t(stack()); }
void recurse_of(int64_t n, at::Tensor out) {
  launch_recurse(int(n), out.data_ptr<int>());
}
"""


def test_cuda_limit_stack_size_sets_each_thread_s_stack():
    ext = ab.compile("faults_stack", STACK, STACK_WRAPPER,
                     ["set_stack_of", "stack_of", "recurse_of"], backend="emulator")
    out = torch.zeros(64, dtype=torch.int32)
    assert ext.stack_of() == 512 * 1024   # the most a GPU thread may have
    for workers in (1, 2):
        with ab.workers(workers):
            ext.recurse_of(1000, out)   # 1000 levels: over 256 KB
            assert (out == 1000 * 1001 // 2).all()
            assert ext.set_stack_of(16 * 1024) == 0
            assert ext.stack_of() == 16 * 1024
            with pytest.raises(ab.KernelFault,
                               match=r"kernel 'recurse', block \(0,0,0\), thread "
                                     r"\(0,0,0\): stack overflow: the thread used "
                                     r"more than its 80 KiB of stack "
                                     r"\(cudaLimitStackSize"):
                ext.recurse_of(1000, out)
            ext.recurse_of(100, out)    # 100 levels fit in 16 KiB and the emulator's
            assert (out == 100 * 101 // 2).all()
            assert ext.set_stack_of(512 * 1024 + 1) == 1   # cudaErrorInvalidValue
            assert ext.set_stack_of(512 * 1024) == 0
            ext.recurse_of(1000, out)
            assert (out == 1000 * 1001 // 2).all()


def test_more_local_memory_than_a_gpu_allows_is_a_compile_error():
    src = "__global__ void big(float* c) {\n  volatile float a[131088];\n" \
          "  for (int j = 0; j < 131088; ++j) a[j] = j;\n  c[0] = a[7];\n}\n" \
          "void launch(float* c) { big<<<1, 1>>>(c); }\n"
    with pytest.raises(ab.CompileError, match=r"(?s)frame size of \d+ bytes is "
                                              r"larger than 5243\d\d.*at most 512 KiB "
                                              r"of local"):
        ab.compile("faults_local", src, "void launch(float*);\n"
                   "void run(at::Tensor c) { launch(c.data_ptr<float>()); }", ["run"],
                   backend="emulator")


def test_a_thread_may_have_all_512_kib_of_local_memory():
    # 524,288 bytes, which ptxas takes, were refused: the frame holds a few more bytes
    src = "__global__ void most(float* c) {\n  volatile float a[131072];\n" \
          "  for (int j = 0; j < 131072; ++j) a[j] = j;\n  c[0] = a[131071];\n}\n" \
          "void launch(float* c) { most<<<1, 2>>>(c); }\n"
    ext = ab.compile("faults_most_local", src, "void launch(float*);\n"
                     "void run(at::Tensor c) { launch(c.data_ptr<float>()); }", ["run"],
                     backend="emulator")
    for checked in (False, True):
        c = torch.zeros(1)
        with ab.sanitize() if checked else contextlib.nullcontext():
            ext.run(c)
        assert c.item() == 131071


def test_a_fault_in_a_checked_build_is_an_exception_too(ext):
    # ab.profile runs the checked build without memcheck: the wild write faults.
    with ab.profile(), pytest.raises(ab.KernelFault, match=CASES[
            "write far out of bounds"][3]):
        ext.run_wrong(0, 1, 0, 1 << 40, 0, torch.zeros(256))
    # memcheck stops it before it happens.
    with ab.sanitize(), pytest.raises(ab.MemcheckError, match="byte shared memory|"
                                                              "dynamic shared memory"):
        ext.run_wrong(4, 0, 0, 0, 0, torch.zeros(256))
    fill_works(ext)


@pytest.mark.parametrize("n, checks", [(1, None), (2, None), (2, "sanitize"),
                                      (1, "profile")])
def test_ctrl_c_from_a_python_timer_stops_a_barrier_free_loop(ext, n, checks):
    # A timer thread of this process sends SIGINT, as the GIL is free while a kernel
    # runs (the launch touches no Python object); inside sanitize() and profile() it
    # was not, and the launch ran to its time budget.
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    checked = getattr(ab, checks)() if checks else contextlib.nullcontext()
    with ab.workers(n), ab.time_budget(20), checked:
        timer.start()
        with pytest.raises(ab.KernelInterrupted, match="kernel 'spin' was interrupted"):
            ext.run_spin(torch.zeros(256))
    assert time.monotonic() - start < 1.3
    fill_works(ext)


def test_the_largest_grid_keeps_to_the_time_budget(ext):
    start = time.monotonic()
    with ab.time_budget(0.5), pytest.raises(ab.KernelTimeout) as info:
        ext.run_tiny(torch.zeros(1))
    assert time.monotonic() - start < 2
    assert "of 2147483647 blocks had not finished" in str(info.value)
    assert not isinstance(info.value, KeyboardInterrupt)
    fill_works(ext)


def resident_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def test_a_thousand_faulting_launches_leave_memory_flat(ext):
    out = torch.zeros(256)

    def launches(k):
        for j in range(k):
            with pytest.raises(ab.KernelFault):
                ext.run_wrong(j % 2, j % 4, j % 64, 1 << 40, 0, out)
            ext.run_fill(out)

    launches(100)
    before = resident_mib()
    launches(1000)
    assert resident_mib() - before < 8


def test_repeated_launches_of_each_op_leave_memory_flat():
    """A thousand launches of each op, or for an op whose launch takes over 2 ms on this
    machine 200 (its blocks own more memory: a leak of a block's shared memory or a
    thread's stack still adds up to far more than the margin)."""
    from attnbook.gpu.launches import LAUNCHES
    counts = {}
    for name, launch in LAUNCHES.items():   # builds, caches and allocator pools
        start = time.perf_counter()
        for _ in range(20):
            launch("cpu")
        counts[name] = 1000 if time.perf_counter() - start < 20 * 2e-3 else 200
    before = resident_mib()
    for name, launch in LAUNCHES.items():
        for _ in range(counts[name]):
            launch("cpu")
    assert resident_mib() - before < 16


@pytest.mark.gpu
def test_a_thousand_launches_of_each_op_leave_gpu_memory_flat():
    """The GPU half: the caching allocator's live bytes, not its pools, after a thousand
    launches of each package launch on the GPU."""
    from attnbook.gpu.launches import LAUNCHES
    for launch in LAUNCHES.values():
        for _ in range(20):
            launch("cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for launch in LAUNCHES.values():
        for _ in range(1000):
            launch("cuda")
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before < 1 << 20
