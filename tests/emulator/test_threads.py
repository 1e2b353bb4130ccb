"""Launches from several Python threads: they take turns on the emulator's workers (one
launch at a time in the process; a plain launch lets go of the GIL while it runs, so
the other threads' Python goes on), and each gets its own result or its own error,
inside and outside ``ab.sanitize()`` and ``ab.profile()``. Two threads calling one
extension once waited for each other for ever: one held the GIL while waiting for the
launch in progress, which needed the GIL back to return. Each case runs in a child
process, which ends however its threads do."""
import os
import subprocess
import sys
import threading

import pytest
import torch

import attnbook as ab

SOURCE = r"""
// y = x + c over n floats; the thread of index `wild` (if any) writes `at` floats
// past y's start instead of its own element.
__global__ void shift(const float* x, float* y, int n, float c, int wild,
                      long long at) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == wild) y[at] = 1.f;
  else if (i < n) y[i] = x[i] + c;
}

void launch_shift(const float* x, float* y, int n, float c, int wild, long long at) {
  shift<<<(n + 127) / 128, 128>>>(x, y, n, c, wild, at);
}
"""

WRAPPER = r"""
void launch_shift(const float*, float*, int, float, int, long long);
at::Tensor run_shift(at::Tensor x, double c, int64_t wild, int64_t at) {
  at::Tensor y = at::empty_like(x);
  launch_shift(x.data_ptr<float>(), y.data_ptr<float>(), int(x.numel()), float(c),
               int(wild), at);
  return y;
}
"""

THREADS, CALLS = 4, 100
FAR = 1 << 40   # 4 TiB past y: a fault in every mode


def extensions():
    """Two extensions of the same text (two libraries, two sets of globals)."""
    return [ab.compile(f"threads_{k}", SOURCE, WRAPPER, ["run_shift"],
                       backend="emulator") for k in range(2)]


def hammer(calls, each, threads=THREADS, within=200):
    """Run ``each(thread, call)`` ``calls`` times on each of ``threads`` threads and
    print what went wrong: the errors the calls raised that they should not have, or
    that threads had not finished after ``within`` seconds."""
    wrong = []

    def body(t):
        try:
            for c in range(calls):
                each(t, c)
        except BaseException as e:   # noqa: BLE001 -- reported below
            wrong.append(f"thread {t}: {type(e).__name__}: {e}")

    runs = [threading.Thread(target=body, args=(t,), daemon=True)
            for t in range(threads)]
    for r in runs:
        r.start()
    for r in runs:
        r.join(within)
    if any(r.is_alive() for r in runs):
        wrong.append("the threads waited for each other")
    print("\n".join(wrong) or "every call right", flush=True)


def shift_checked(ext, t, c, fault):
    """One call: n differs by thread and call; every fourth call of an odd thread
    faults when ``fault``, and the fault must be the call's own."""
    n = 200 + 37 * t + c % 7
    x = torch.randn(n)
    if fault and t % 2 and c % 4 == 0:
        try:
            ext.run_shift(x, 0.5, 3, FAR)
        except (ab.KernelFault, ab.MemcheckError):
            return
        raise AssertionError(f"thread {t} call {c}: its fault went unreported")
    y = ext.run_shift(x, float(t), -1, 0)
    assert torch.equal(y, x + t), f"thread {t} call {c}: another thread's result"


def scenario(name):
    """The child's side: run one case of the tests below."""
    exts = extensions()
    fault = name.endswith("faults")
    if name.startswith("one"):
        hammer(CALLS, lambda t, c: shift_checked(exts[0], t, c, fault))
    elif name.startswith("two"):
        hammer(CALLS, lambda t, c: shift_checked(exts[t % 2], t, c, fault))
    elif name.startswith("sanitize"):
        with ab.sanitize():
            hammer(CALLS // 4, lambda t, c: shift_checked(exts[0], t, c, fault))
    elif name == "profile":
        with ab.profile() as report:
            hammer(5, lambda t, c: shift_checked(exts[1], t, c, False))
        print("launches", len(report.launches), {p.kernel for p in report.launches})
    elif name == "attention":
        q, k, v = (torch.randn(1, 2, 33, 32) for _ in range(3))
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        hammer(10, lambda t, c: torch.testing.assert_close(
            ab.attention(q, k, v, is_causal=True), want))


def in_child(name) -> list[str]:
    """The lines a child running ``scenario(name)`` printed; it exits at once after
    (threads left waiting would keep a normal exit waiting too)."""
    code = (f"import os, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            f"import test_threads; test_threads.scenario({name!r}); os._exit(0)")
    try:
        child = subprocess.run([sys.executable, "-c", code], capture_output=True,
                               text=True, timeout=240,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:   # a thread waiting with the GIL holds them all
        pytest.fail("the threads waited for each other: no end after 240 s")
    assert child.returncode == 0, child.stderr[-3000:]
    return child.stdout.splitlines()


@pytest.fixture(scope="module", autouse=True)
def built():
    extensions()   # compiled once, here, for the children


@pytest.mark.parametrize("name", ["one extension", "one extension with faults",
                                  "two extensions", "two extensions with faults"])
def test_threads_launching_at_once_finish_with_their_own_results(name):
    assert in_child(name) == ["every call right"]


@pytest.mark.parametrize("name", ["sanitize", "sanitize with faults"])
def test_threads_inside_sanitize_see_only_their_own_errors(name):
    """Each checked call's allocations are its own: a call of another thread, with
    other tensors, made in-bounds writes look out of bounds (a false MemcheckError)."""
    assert in_child(name) == ["every call right"]


def test_a_profile_counts_every_thread_s_launches():
    assert in_child("profile") == ["every call right",
                                   f"launches {THREADS * 5} {{'shift'}}"]


def test_attention_from_threads():
    assert in_child("attention") == ["every call right"]
