"""The emulator's worker threads: blocks run on several OS threads at once, and nothing
a kernel can observe within a block depends on how many."""
import pathlib

import pytest
import torch

import attnbook as ab
import cuda_emulator as emulator

HERE = pathlib.Path(__file__).parents[1] / "cuda"
ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 1), ("shuffle", 2)]

EXTRA = r"""
// Half of each warp leaves at once; the other half then shuffles among itself. The
// threads that leave never wait, so the emulator runs them back to back on one stack:
// the first thread to wait must still get a stack of its own.
__global__ void early_exit_shuffle(float* out) {
  int t = threadIdx.x;
  if (t % 32 < 16) return;
  out[blockIdx.x * blockDim.x + t] = __shfl_xor_sync(0xffff0000u, float(t), 1);
}

// Every thread of every block counts itself, in integers and in floats.
__global__ void count_all(int* n, float* half_n) {
  atomicAdd(n, 1);
  atomicAdd(half_n, 0.5f);
}

void launch_early_exit_shuffle(int blocks, float* out) {
  early_exit_shuffle<<<blocks, 64>>>(out);
}
void launch_count_all(int blocks, int* n, float* half_n) {
  count_all<<<blocks, 128>>>(n, half_n);
}
"""

EXTRA_WRAPPER = r"""
void launch_early_exit_shuffle(int, float*);
void launch_count_all(int, int*, float*);

void run_early_exit_shuffle(at::Tensor out) {
  launch_early_exit_shuffle(out.numel() / 64, out.data_ptr<float>());
}
void run_count_all(int64_t blocks, at::Tensor n, at::Tensor half_n) {
  launch_count_all(blocks, n.data_ptr<int>(), half_n.data_ptr<float>());
}
"""


@pytest.fixture(scope="module")
def ext():
    return ab.compile("selftest", (HERE / "selftest.cu").read_text(),
                      (HERE / "selftest_wrapper.cpp").read_text(), ["run"],
                      backend="emulator")


@pytest.fixture(scope="module")
def extra():
    return ab.compile("emulator_workers", EXTRA, EXTRA_WRAPPER,
                      ["run_early_exit_shuffle", "run_count_all"], backend="emulator")


def run(ext, which, tensors, grid, block, workers, order=("forward", 0), args=()):
    with emulator.workers(workers), ab.thread_order(*order):
        ext.run(which, list(tensors), grid, block, 0, list(args))


def test_workers_must_be_a_positive_int():
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError):
            emulator.workers(bad)


def test_bad_worker_count_in_the_environment_is_rejected(ext, monkeypatch):
    monkeypatch.setenv("ATTNBOOK_EMU_WORKERS", "many")
    with pytest.raises(RuntimeError, match="ATTNBOOK_EMU_WORKERS must be a positive"):
        ext.run("block_sum", [torch.zeros(256), torch.zeros(1)], 1, 256, 0, [256])


def test_results_are_identical_for_any_worker_count(ext):
    """A block's thread order depends on the seed and the block's index only: even a
    racy kernel, whose sums depend on the order, gives the same bits with 1 and 2
    workers."""
    x = torch.randn(64, 256)
    for order in ORDERS:
        outs = {1: torch.zeros(64), 2: torch.zeros(64)}
        for workers, out in outs.items():
            run(ext, "block_sum_bug", [x, out], 64, 256, workers, order, [256])
        assert torch.equal(outs[1], outs[2]), order
        good = torch.zeros(64)
        run(ext, "block_sum", [x, good], 64, 256, 2, order, [256])
        torch.testing.assert_close(good, x.sum(1))


def test_shuffled_blocks_do_not_share_one_schedule(ext):
    x = torch.arange(256, dtype=torch.float32).repeat(64, 1)   # one row for every block
    out = torch.zeros(64)
    run(ext, "block_sum_bug", [x, out], 64, 256, 2, ("shuffle", 1), [256])
    assert len(set(out.tolist())) > 1


def test_planted_bugs_are_caught_with_several_workers(ext):
    x = torch.arange(8 * 256, dtype=torch.float32).reshape(8, 256)
    wrong = set()
    for order in ORDERS:
        out = torch.zeros(8)
        run(ext, "block_sum_bug", [x, out], 8, 256, 2, order, [256])
        wrong.add(not torch.equal(out, x.sum(1)))
    assert True in wrong
    for which, size, want in (("rotate_bug", 128, lambda v: torch.roll(v, -2)),
                              ("warp_sum_bug", 32, lambda v: v.sum().reshape(1))):
        v = torch.arange(size, dtype=torch.float32)
        outs = set()
        for order in ORDERS:
            out = torch.zeros(want(v).numel())
            run(ext, which, [v, out], 1, size, 2, order)
            outs.add(torch.equal(out, want(v)))
        assert False in outs, which


def test_unwritten_shared_memory_is_nan_on_every_worker(ext):
    with emulator.workers(2):
        out = torch.zeros(4 * 64)
        ext.run("unwritten", [out], 64, 32, 64, [])
    out = out.view(64, 4)
    assert (out[:, 0] == 1).all() and (out[:, 2] == 2).all()
    assert out[:, 1].isnan().all() and out[:, 3].isnan().all()


def test_atomics_are_atomic_across_workers(ext, extra):
    for workers in (1, 2):
        n, half_n = torch.zeros(1, dtype=torch.int32), torch.zeros(1)
        with emulator.workers(workers):
            extra.run_count_all(512, n, half_n)
        assert n.item() == 512 * 128 and half_n.item() == 512 * 128 / 2
    counters = torch.tensor([0, -1, 0, 0, 0, 100], dtype=torch.int32)
    fsum, big = torch.zeros(1), torch.zeros(1, dtype=torch.int64)
    run(ext, "atomics", [counters, fsum, big], 256, 64, 2, ("shuffle", 5))
    n = 256 * 64
    assert counters[0] == n and counters[1] == n - 1 and counters[2] == -(n - 1)
    assert 1 <= counters[3] <= n and counters[4] == 7 and counters[5] == 100 - 2 * n
    assert fsum.item() == n / 2 and big.item() == n << 33


def test_threads_that_never_wait_share_a_stack_safely(extra):
    want = torch.zeros(16, 64)
    lanes = torch.arange(64)
    want[:, lanes % 32 >= 16] = (lanes[lanes % 32 >= 16] ^ 1).float()
    for order in ORDERS:
        for workers in (1, 2):
            out = torch.zeros(16 * 64)
            with emulator.workers(workers), ab.thread_order(*order):
                extra.run_early_exit_shuffle(out)
            assert torch.equal(out.view(16, 64), want), (order, workers)


def test_an_error_in_one_block_stops_the_launch_and_the_next_one_works(ext):
    out = torch.zeros(64)
    match = r"block \(1,0,0\), thread \(5,0,0\): __trap"
    with pytest.raises(RuntimeError, match=match):
        run(ext, "failing", [out], 256, 32, 2, args=[0])
    run(ext, "failing", [out], 256, 64, 2, args=[6])
    assert (out == 1).all()


def test_the_error_reported_is_the_first_block_s(ext):
    """Every block fails; whichever worker fails first, the error is block 0's, as with
    one worker."""
    match = r"block \(0,0,0\), thread \(3,0,0\): device assert"
    for _ in range(5):
        with pytest.raises(RuntimeError, match=match):
            run(ext, "failing", [torch.zeros(64)], 256, 32, 2, args=[1])
