"""The CPU emulator against the documented semantics of each CUDA built-in, the PTX
ISA's fragment layouts, and kernels with planted bugs that it must catch."""
import math
import pathlib
import time

import pytest
import torch

import attnbook as ab
from attnbook.reference import fragments as ptx
from fragment_cases import check_ldmatrix, gather_c, mma_case

HERE = pathlib.Path(__file__).parents[1] / "cuda"
ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 1), ("shuffle", 2)]


@pytest.fixture(scope="module")
def ext():
    return ab.compile("selftest", (HERE / "selftest.cu").read_text(),
                      (HERE / "selftest_wrapper.cpp").read_text(), ["run"],
                      backend="emulator")


def run(ext, which, tensors, grid=1, block=32, smem=0, args=(), order=("forward", 0)):
    with ab.thread_order(*order):
        ext.run(which, list(tensors), grid, block, smem, list(args))


def results_under_orders(ext, which, make, **kw):
    """Run a kernel under every order; return the set of distinct outputs."""
    outs = set()
    for order in ORDERS:
        tensors = make()
        run(ext, which, tensors, order=order, **kw)
        outs.add(tuple(tensors[-1].flatten().tolist()))
    return outs


# ---- correct kernels pass in every order; planted bugs fail in at least one ----------
def test_block_reduction_correct_in_every_order(ext):
    x = torch.arange(3 * 200, dtype=torch.float32).reshape(3, 200)
    for order in ORDERS:
        out = torch.zeros(3)
        run(ext, "block_sum", [x, out], grid=3, block=256, args=[200], order=order)
        torch.testing.assert_close(out, x.sum(1))


def test_missing_barrier_in_reduction_is_caught(ext):
    x = torch.arange(256, dtype=torch.float32)
    outs = results_under_orders(ext, "block_sum_bug", lambda: [x, torch.zeros(1)],
                                block=256, args=[256])
    assert any(o != (float(x.sum()),) for o in outs)


def test_missing_write_after_read_barrier_is_caught(ext):
    x = torch.arange(128, dtype=torch.float32)
    want = tuple(torch.roll(x, -2).tolist())
    good = results_under_orders(ext, "rotate", lambda: [x, torch.zeros(128)], block=128)
    assert good == {want}
    bad = results_under_orders(ext, "rotate_bug", lambda: [x, torch.zeros(128)],
                               block=128)
    assert any(o != want for o in bad)


def test_missing_syncwarp_is_caught(ext):
    x = torch.arange(32, dtype=torch.float32)
    assert results_under_orders(ext, "warp_sum",
                                lambda: [x, torch.zeros(1)]) == {(float(x.sum()),)}
    assert any(o != (float(x.sum()),)
               for o in results_under_orders(ext, "warp_sum_bug",
                                             lambda: [x, torch.zeros(1)]))


# ---- warp intrinsics -----------------------------------------------------------------
def shuffle_model(mode, arg, width):
    out = []
    for lane in range(32):
        base = lane - lane % width
        if mode == 0:
            src = base + arg % width
        elif mode == 1:
            src = lane - arg if lane - base >= arg else lane
        elif mode == 2:
            src = lane + arg if lane - base + arg < width else lane
        else:
            src = lane ^ arg if (lane ^ arg) - (lane ^ arg) % width == base else lane
        out.append(100 + src)
    return out


@pytest.mark.parametrize("mode", [0, 1, 2, 3], ids=["idx", "up", "down", "xor"])
@pytest.mark.parametrize("arg,width", [(1, 32), (5, 32), (3, 8), (16, 32), (2, 4),
                                       (7, 16)])
def test_shuffles(ext, mode, arg, width):
    src = torch.arange(100, 132, dtype=torch.int32)
    for order in ORDERS[:3]:
        out = torch.zeros(32, dtype=torch.int32)
        run(ext, "shuffles", [src, out], args=[mode, arg, width], order=order)
        assert out.tolist() == shuffle_model(mode, arg, width)


def test_butterfly_sum_of_floats(ext):
    x = torch.randn(32)
    out = torch.zeros(32)
    run(ext, "float_shuffle_sum", [x, out], order=("shuffle", 3))
    torch.testing.assert_close(out, x.sum().expand(32))


def test_votes_and_counting_barriers(ext):
    pred = torch.tensor([(i % 3 == 0) for i in range(64)], dtype=torch.int32)
    out = torch.zeros(64 * 4, dtype=torch.int32)
    run(ext, "votes", [pred, out], block=64)
    out = out.view(64, 4).tolist()
    for lane in range(64):
        w = pred[lane - lane % 32: lane - lane % 32 + 32]
        ballot = sum(1 << i for i in range(32) if w[i])
        assert out[lane][0] & 0xffffffff == ballot
        assert out[lane][1] == 1 and out[lane][2] == 0
        assert out[lane][3] == int(pred.sum()) * 100 + 0 * 10 + 1


# ---- atomics, math, 16-bit floats, vectors, coordinates ------------------------------
def test_atomics(ext):
    counters = torch.tensor([0, -1, 0, 0, 0, 100], dtype=torch.int32)
    fsum, big = torch.zeros(1), torch.zeros(1, dtype=torch.int64)
    run(ext, "atomics", [counters, fsum, big], grid=3, block=64, order=("shuffle", 5))
    assert counters[0] == 192 and counters[1] == 191 and counters[2] == -191
    assert 1 <= counters[3] <= 192 and counters[4] == 7 and counters[5] == 100 - 2 * 192
    assert fsum.item() == 96.0 and big.item() == 192 << 33


def test_math_functions(ext):
    x = torch.linspace(-3, 3, 20)
    out = torch.zeros(20 * 8)
    run(ext, "math", [x, out], block=32, args=[20])
    out = out.view(20, 8)
    want = torch.stack([x.exp(), torch.exp2(x), x / 3, (x.abs() + 1).rsqrt(),
                        x.clamp(min=0), x,
                        (x.abs() + 1).log(),
                        torch.tensor([float(min(i, 3) + max(i, 2))
                                      for i in range(20)])], 1)
    torch.testing.assert_close(out, want)


def test_half_and_bfloat16_round_like_torch(ext):
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(500, generator=g) * 1000,
                   torch.randn(500, generator=g) * 1e-5,
                   torch.tensor([65504.0, 65520.0, 1e6, -0.0, 5.96e-8, 3.0e-8, math.inf,
                                 -math.inf])])
    # every half and each midpoint between neighbours (a tie: rounds to the even one)
    every = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(
        torch.float16).float()
    every = every[every.isfinite()].sort().values
    x = torch.cat([x, every, (every[1:] + every[:-1]) / 2])
    n = x.numel()
    out = torch.zeros(n * 4)
    run(ext, "sixteen_bit", [x, out], grid=(n + 127) // 128, block=128, args=[n])
    out = out.view(n, 4)
    assert torch.equal(out[:, 0], x.half().float())
    assert torch.equal(out[:, 1], x.bfloat16().float())
    assert torch.equal(out[:, 2], (x.half() + 1).float())
    assert torch.equal(out[:, 3], ((2 * x).half() * 0.5).float())


def test_float4_loads(ext):
    x = torch.arange(4 * 37, dtype=torch.float32)
    out = torch.zeros_like(x)
    run(ext, "float4", [x, out], grid=2, block=32, args=[37])
    assert torch.equal(out.view(37, 4), x.view(37, 4).flip(1))


def test_three_dimensional_grids_and_blocks(ext):
    out = torch.zeros(2 * 3 * 2 * 24, dtype=torch.int32)
    run(ext, "coordinates", [out], args=[2, 3, 2])
    assert out.tolist() == [3 * i for i in range(out.numel())]


# ---- shared memory -------------------------------------------------------------------
def test_unwritten_shared_memory_reads_nan(ext):
    out = torch.zeros(8)
    run(ext, "unwritten", [out], grid=2, block=32, smem=64)
    out = out.view(2, 4)
    assert (out[:, 0] == 1).all() and (out[:, 2] == 2).all()
    # also in the second block
    assert out[:, 1].isnan().all() and out[:, 3].isnan().all()


def test_dynamic_shared_limit_and_opt_in(ext):
    out = torch.zeros(256)
    with pytest.raises(RuntimeError, match=r"big_dynamic_shared.*dynamic shared memory"
                                           r".*cudaFuncSetAttribute"):
        run(ext, "big_smem", [out], block=256, smem=64 * 1024, args=[0])
    run(ext, "big_smem", [out], block=256, smem=64 * 1024, args=[1])
    assert out.tolist() == list(range(255, -1, -1))


# ---- failures become exceptions; the next launch works -------------------------------
@pytest.mark.parametrize("mode,pattern", [
    (0, r"kernel 'failing', block \(1,0,0\), thread \(5,0,0\): __trap"),
    (1, r"kernel 'failing', block \(0,0,0\), thread \(3,0,0\): "
        r"device assert failed .*t != 3"),
    (2, r"kernel 'failing'.*divergent barrier.*line"),
    (3, r"kernel 'failing'.*divergent barrier.*exited"),
    (4, r"kernel 'failing'.*(lane 31 .*exited|deadlock)"),
])
def test_failures_raise_and_the_process_survives(ext, mode, pattern):
    out = torch.zeros(64)
    with pytest.raises(RuntimeError, match=pattern):
        run(ext, "failing", [out], grid=2, block=32, args=[mode])
    out = torch.zeros(64)
    run(ext, "failing", [out], grid=2, block=64, args=[6])
    assert (out == 1).all()


def test_printf_reaches_stdout(ext, capfd):
    run(ext, "failing", [torch.zeros(64)], grid=1, block=2, args=[5])
    printed = capfd.readouterr().out
    assert ("block 0 thread 0 says hello" in printed
            and "block 0 thread 1 says hello" in printed)


def test_bad_thread_order_is_rejected():
    with pytest.raises(ValueError):
        with ab.thread_order("sideways"):
            pass


LIMITS = r"""
__global__ void mark(float* out) {
  if (threadIdx.x + blockIdx.x + blockIdx.y + blockIdx.z == 0) out[0] += 1.0f;
}
void launch_mark(float* out, long long gx, long long gy, long long gz, long long bx,
                 long long bz) {
  mark<<<dim3(unsigned(gx), unsigned(gy), unsigned(gz)), dim3(unsigned(bx), 1,
                                                               unsigned(bz))>>>(out);
}
"""
LIMITS_WRAPPER = r"""
void launch_mark(float*, long long, long long, long long, long long, long long);
void run_mark(at::Tensor out, int64_t gx, int64_t gy, int64_t gz, int64_t bx,
              int64_t bz) {
  launch_mark(out.data_ptr<float>(), gx, gy, gz, bx, bz);
}
"""


@pytest.mark.parametrize("grid,block", [
    ((2**31, 1, 1), (32, 1)),      # once a hang: x is at most 2^31 - 1
    ((0, 1, 1), (32, 1)), ((1, 65536, 1), (32, 1)), ((1, 1, 65536), (32, 1)),
    ((1, 1, 1), (1025, 1)), ((1, 1, 1), (1, 65)), ((1, 1, 1), (0, 1)),
])
def test_launch_limits_are_cudas_and_refused_before_any_thread_runs(grid, block):
    ext = ab.compile("launch_limits", LIMITS, LIMITS_WRAPPER, ["run_mark"],
                     backend="emulator")
    out = torch.zeros(1)
    start = time.monotonic()
    with ab.time_budget(30), pytest.raises(
            RuntimeError, match=r"kernel 'mark': invalid configuration argument: "
                                + ("grid" if block == (32, 1) else "block")):
        ext.run_mark(out, *grid, *block)
    assert time.monotonic() - start < 2 and out.item() == 0
    ext.run_mark(out, 3, 2, 1, 64, 1)      # the process goes on
    assert out.item() == 1


# ---- tensor cores against the PTX ISA's fragment tables ------------------------------
@pytest.mark.parametrize("kind,k,dtype,a_layout,b_layout", [
    (0, 16, torch.float16, ptx.a_m16n8k16, ptx.b_m16n8k16),
    (1, 16, torch.bfloat16, ptx.a_m16n8k16, ptx.b_m16n8k16),
    (2, 8, torch.float16, ptx.a_m16n8k8, ptx.b_m16n8k8),
])
def test_mma_fragment_layouts(ext, kind, k, dtype, a_layout, b_layout):
    a, b, c, want = mma_case(kind, k, dtype, a_layout, b_layout)
    d = torch.zeros(32, 4)
    run(ext, "mma", [a, b, c, d], args=[kind])
    torch.testing.assert_close(gather_c(d), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_layouts(ext, n, trans):
    # element value = its index
    m = torch.arange(4 * 64, dtype=torch.int32).to(torch.int16)
    out = torch.zeros(32 * 4, dtype=torch.int32)
    run(ext, f"ldmatrix_x{n}" + ("_trans" if trans else ""), [m, out])
    check_ldmatrix(out, n, trans)


def test_wrong_fragment_layout_is_caught(ext):
    g = torch.Generator().manual_seed(9)
    A, Bt = (torch.randn(16, 16, generator=g).half(),
             torch.randn(8, 16, generator=g).half())
    want = A.float() @ Bt.float().T
    D = torch.zeros(16, 8)
    run(ext, "mma_gemm", [A, Bt, D])
    torch.testing.assert_close(D, want, rtol=1e-3, atol=1e-3)
    run(ext, "mma_gemm_bug", [A, Bt, D])
    assert not torch.allclose(D, want, rtol=1e-3, atol=1e-3)


def test_including_cassert_keeps_the_device_assert():
    """<cassert> redefines assert at every inclusion; kernel text that includes it
    (as it must, for nvcc) still gets the emulator's assert, an exception naming the
    line."""
    src = "#include <cassert>\n__global__ void k(int n) {\n  assert(n > 0);\n}\n" \
          "void launch(int n) { k<<<1, 32>>>(n); }\n"
    ext = ab.compile("assert_after_cassert", src,
                     "void launch(int);\nvoid run(int64_t n) { launch(int(n)); }",
                     ["run"], backend="emulator")
    ext.run(1)
    with pytest.raises(RuntimeError, match="device assert failed on line 3: n > 0"):
        ext.run(0)
