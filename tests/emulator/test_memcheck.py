"""Memcheck: planted out-of-bounds accesses are reported as compute-sanitizer would,
with the access's line, thread and block and where the address lies; clean kernels,
the fused fp32 attention among them, pass."""
import re

import pytest
import torch

import attnbook as ab
from checked_kernels import line_of, run


def test_global_write_past_the_end():
    out = torch.zeros(1024)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("write_past_end", out, out, n=1024, blocks=17, threads=64)
    e = info.value
    assert isinstance(e, RuntimeError)
    assert (e.kind, e.space, e.size) == ("write", "global", 4)
    assert e.location == line_of("past-end")
    assert (e.block, e.thread) == ((16, 0, 0), (0, 0, 0))
    assert e.detail.startswith("is out of bounds: 0 bytes past the end of a 4096-byte "
                               "allocation at 0x")
    assert str(e).startswith("memcheck: invalid __global__ write of size 4 bytes at "
                             f"{line_of('past-end')} in kernel 'write_past_end' by "
                             "thread (0,0,0) in block (16,0,0): address 0x")
    # the launch after a stopped one runs normally
    x = torch.ones(1000)
    with ab.sanitize():
        run("block_sum", x, sums := torch.zeros(1), n=1000, blocks=8, threads=128,
            smem=16)
    assert sums.item() == 1000


def test_global_read_before_the_start():
    x, out = torch.ones(32), torch.zeros(32)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("read_before_start", x, out)
    e = info.value
    assert (e.kind, e.space, e.location) == ("read", "global",
                                             line_of("before-start"))
    assert e.thread == (0, 0, 0)
    assert "4 bytes before the start of a 128-byte allocation" in e.detail


def test_dynamic_shared_memory_past_the_launch_request():
    out = torch.zeros(64)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("dynamic_overrun", out, out, threads=64, smem=63 * 4)
    e = info.value
    assert (e.kind, e.space, e.location) == ("write", "shared", line_of("dynamic"))
    assert e.thread == (63, 0, 0)
    assert e.detail == ("is 0 bytes past the end of the block's 252 bytes of dynamic "
                        "shared memory")


def test_static_shared_array_overrun():
    out = torch.zeros(33)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("static_overrun", out, out, threads=33)
    e = info.value
    assert (e.space, e.location, e.thread) == ("shared", line_of("static"), (32, 0, 0))
    assert "past the end of a 128-byte __shared__ variable" in e.detail


def test_a_static_shared_array_overrun_further_is_named_shared():
    # tile[40] of a 32-float tile was named a __global__ write 16 MB past a tensor
    out = torch.zeros(32)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("static_at", out, out, n=40)
    e = info.value
    assert (e.space, e.location, e.thread) == ("shared", line_of("static-at"),
                                               (0, 0, 0))
    assert e.detail.startswith("is 32 bytes past the end of a 128-byte __shared__ "
                               "variable at 0x")


@pytest.mark.parametrize("n, detail", [
    (-1, "is 4 bytes before the start of the block's 128 bytes of dynamic shared "
         "memory"),
    (59136, "is 236416 bytes past the end of the block's 128 bytes of dynamic shared "
            "memory"),
    (1 << 20, "is 4194176 bytes past the end of the block's 128 bytes of dynamic "
              "shared memory")])
def test_dynamic_shared_memory_before_and_far_past_is_named(n, detail):
    # buf[-1] and buf past the emulator's 227 KiB went unreported
    out = torch.zeros(32)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("dynamic_at", out, out, n=n, smem=128)
    e = info.value
    assert (e.space, e.location) == ("shared", line_of("dynamic-at"))
    assert e.detail == detail


def test_atomic_past_the_end():
    out = torch.zeros(8)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("atomic_past_end", out, out, n=8)
    assert (info.value.kind, info.value.location) == ("atomic", line_of("atomic"))


def test_local_memory_of_another_thread():
    x, out = torch.ones(32), torch.zeros(32)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("foreign_local", x, out)
    e = info.value
    assert (e.kind, e.space, e.location) == ("read", "local", line_of("foreign"))
    assert e.thread == (1, 0, 0)
    assert e.detail == "is in the stack of another thread"


@pytest.mark.parametrize("n", [200, 4000])
def test_a_local_array_indexed_past_its_end_is_named(n):
    # the bytes above a thread's stack top (up to 64 KiB, staggering the stacks) were
    # taken as its stack; past them, the next thread's guard was named an overflow
    x, out = torch.ones(32), torch.zeros(32)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("local_past_end", x, out, n=n)
    e = info.value
    assert (e.kind, e.space, e.location) == ("write", "local", line_of("local-past"))
    assert e.thread == (5, 0, 0)
    assert re.fullmatch(r"is \d+ bytes above the top of this thread's stack \(a local "
                        r"array indexed past its end\)", e.detail), e.detail


def test_async_copy_past_the_end():
    # cp.async's copy is the emulator's memcpy: checked where the kernel issues it
    x, out = torch.ones(64), torch.zeros(32)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("async_past_end", x, out, n=64)
    e = info.value
    assert (e.kind, e.space, e.size) == ("read", "global", 16)
    assert (e.location, e.thread) == (line_of("async-end"), (16, 0, 0))
    assert e.detail.startswith("is out of bounds: 0 bytes past the end of a 256-byte "
                               "allocation")


def test_clean_kernels_pass_and_compute_the_same():
    x = torch.arange(1000, dtype=torch.float32)
    expected = torch.zeros(1)
    run("block_sum", x, expected, n=1000, blocks=8, threads=128, smem=16)
    out = torch.zeros(1)
    with ab.sanitize():
        run("block_sum", x, out, n=1000, blocks=8, threads=128, smem=16)
    assert out.item() == expected.item() == x.sum().item()


def test_environment_switch(monkeypatch):
    x, out = torch.ones(32), torch.zeros(32)
    monkeypatch.setenv("ATTNBOOK_SANITIZE", "1")
    with pytest.raises(ab.MemcheckError):
        run("read_before_start", x, out)
    monkeypatch.setenv("ATTNBOOK_SANITIZE", "0")
    run("read_before_start", x[1:], out)   # reads x[0]: in bounds, and plain


@pytest.mark.parametrize("shape", [(1, 3, 7, 32), (2, 1, 33, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_is_memcheck_clean(shape, causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape) for _ in range(3))
    plain = ab.attention(q, k, v, is_causal=causal)
    with ab.sanitize():
        checked = ab.attention(q, k, v, is_causal=causal)
    assert torch.equal(checked, plain)
    want = ab.attention_reference(q, k, v, is_causal=causal)
    torch.testing.assert_close(checked, want)


def test_a_failed_addr2line_is_retried_then_named_by_offset(monkeypatch):
    """CI once saw addr2line print nothing for a library it had read before: the
    lookup tries again, and where it never answers, names the access by offset."""
    import subprocess

    from cuda_emulator import sanitizer
    real, calls = subprocess.run, []

    def flaky(args, **kw):
        if args[0] != "addr2line":
            return real(args, **kw)
        calls.append(args)
        if len(calls) == 1 or failing:
            return subprocess.CompletedProcess(args, 1, "", "out of memory")
        return real(args, **kw)

    monkeypatch.setattr(sanitizer.subprocess, "run", flaky)
    monkeypatch.setattr(sanitizer, "_lines", {})
    failing = False
    x, out = torch.ones(32), torch.zeros(32)
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        run("read_before_start", x, out)
    assert info.value.location == line_of("before-start") and len(calls) == 2
    failing, calls[:] = True, []
    monkeypatch.setattr(sanitizer, "_lines", {})
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info, \
            pytest.warns(UserWarning, match="addr2line could not read .*out of memory"):
        run("read_before_start", x, out)
    assert len(calls) == 3
    assert re.fullmatch(r"checked_cases_checked_\w+\.so\+0x[0-9a-f]+:\?",
                        info.value.location)
