"""Inline PTX on the emulator: kernels written with raw asm (tests/cuda/ptx_probe.cu)
against the PTX ISA's fragment tables and instruction semantics, and a clear error for
an instruction the emulator does not implement."""
import pathlib

import pytest
import torch

import attnbook as ab
from attnbook.reference import fragments as ptx
from cuda_emulator import ptx as ptx_transform
from cuda_emulator.build import FMA_FLAGS, fmad_off
from fragment_cases import check_ldmatrix, gather_c, mma_case, pack_bytes

HERE = pathlib.Path(__file__).parents[1] / "cuda"


def build(arch=None):
    return ab.compile("ptx_probe", (HERE / "ptx_probe.cu").read_text(),
                      (HERE / "ptx_probe_wrapper.cpp").read_text(), ["run"],
                      backend="emulator", arch=arch)


@pytest.fixture(scope="module")
def ext():
    return build()


def run_mma(ext, kind, k, dtype, a_layout, b_layout):
    a, b, c, want = mma_case(kind, k, dtype, a_layout, b_layout, c_dtype=dtype)
    d = torch.zeros(32, 4)
    ext.run("mma", [a, b, c, d], kind)
    return gather_c(d), want


@pytest.mark.parametrize("kind,k,dtype,a_layout,b_layout,tol", [
    (0, 16, torch.float16, ptx.a_m16n8k16, ptx.b_m16n8k16, 1e-5),
    (1, 16, torch.bfloat16, ptx.a_m16n8k16, ptx.b_m16n8k16, 1e-5),
    (2, 8, torch.float16, ptx.a_m16n8k8, ptx.b_m16n8k8, 1e-5),
    (3, 16, torch.float16, ptx.a_m16n8k16, ptx.b_m16n8k16, 1e-2),   # f16 accumulators
])
def test_mma_against_the_fragment_tables(ext, kind, k, dtype, a_layout, b_layout, tol):
    D, want = run_mma(ext, kind, k, dtype, a_layout, b_layout)
    torch.testing.assert_close(D, want, rtol=tol, atol=tol)


def test_arch_guard_picks_the_sm75_branch():
    """Built as sm_75, the #else branch (two m16n8k8) computes the same product; the
    bf16 instruction, which sm_75 lacks, is compiled out and leaves C."""
    ext75 = build("sm_75")
    D, want = run_mma(ext75, 0, 16, torch.float16, ptx.a_m16n8k16, ptx.b_m16n8k16)
    torch.testing.assert_close(D, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind, k, a_signed, saturate", [
    (0, 32, True, False), (1, 32, False, True), (2, 16, True, False)])
def test_int8_mma_against_the_fragment_tables(ext, kind, k, a_signed, saturate):
    # m16n8k32 .s8 (sm_80) did not compile: int8 GEMMs online use it
    g = torch.Generator().manual_seed(kind)
    A = torch.randint(0 if not a_signed else -128, 256 if not a_signed else 128,
                      (16, k), generator=g)
    B = torch.randint(-128, 128, (k, 8), generator=g)
    C = torch.randint(-2**20, 2**20, (16, 8), generator=g)
    A[0], A[15], B[:, 0], B[:, 7] = A.max(), A.max(), 127, -128
    C[0, 0], C[15, 7] = 2**31 - 5, -2**31 + 5   # D[0, 0] and D[15, 7] overflow
    a = pack_bytes(A, ptx.a_m16n8k32_int8, k // 8)
    b = pack_bytes(B, ptx.b_m16n8k32_int8, k // 16)
    c = torch.zeros(32, 4, dtype=torch.int32)
    for lane in range(32):
        for i in range(4):
            c[lane, i] = int(C[ptx.c_m16n8(lane, i)])
    d = torch.zeros(32, 4, dtype=torch.int32)
    ext.run("mma_int8", [a, b, c, d], kind)
    exact = A @ B + C
    want = exact.clamp(-2**31, 2**31 - 1) if saturate else \
        (exact + 2**31) % 2**32 - 2**31     # wraps to 32 bits
    got = torch.zeros(16, 8, dtype=torch.int64)
    for lane in range(32):
        for i in range(4):
            got[ptx.c_m16n8(lane, i)] = int(d[lane, i])
    assert torch.equal(got, want)
    assert exact[0, 0] > 2**31 and exact[15, 7] < -2**31


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_against_the_fragment_table(ext, n, trans):
    m = torch.arange(4 * 64, dtype=torch.int32).to(torch.int16)
    out = torch.zeros(32 * 4, dtype=torch.int32)
    ext.run(f"ldmatrix_x{n}" + ("_trans" if trans else ""), [m, out], 0)
    check_ldmatrix(out, n, trans)


@pytest.mark.parametrize("src_bytes", [16, 8, 0])
def test_cp_async_groups_zero_fill_and_waits(ext, src_bytes):
    src = torch.arange(1, 129, dtype=torch.float32)
    out = torch.zeros(384)
    ext.run("cp_async", [src, out], src_bytes)
    first = src.view(32, 4).clone()
    first[:, src_bytes // 4:] = 0                        # zero-filled past src-size
    assert torch.equal(out[:128], first.flatten())
    assert torch.equal(out[128:256], src)                # after wait_all
    assert out[256:].isnan().all()                       # the second group, not waited


def test_shared_addresses_belong_to_the_object_not_the_first_pointer(ext):
    """A pointer into the middle of shared memory converted first (in this launch or
    an earlier one) once became its window's base: the memory's start then had another
    window, and an address swizzled by XOR landed on other bytes (a learner's
    matmul passed alone and was 92% wrong after another kernel ran)."""
    for first in (17408, 0, 3000):
        out = torch.zeros(8, dtype=torch.int32)
        ext.run("shared_addresses", [out], first)
        start = int(out[1])
        assert start % (1 << 18) == 0                      # the window's own start
        assert int(out[0]) - start == first and int(out[2]) - start == 16384
        assert int(out[3]) == 12345                        # the swizzled store landed
        assert int(out[4]) - int(out[5]) == 4 * (first % 64)
        # the static array: on 1 KiB, above the 32 KiB of dynamic shared memory in the
        # low 18 bits (a wgmma descriptor keeps only those)
        assert int(out[5]) % 1024 == 0 and 32768 <= int(out[5]) % (1 << 18)


def _fma_case():
    """a = b = 1 + 2^-12, c = -(1 + 2^-11): a·b rounded to float is 1 + 2^-11 (the
    2^-24 it loses is half an ulp, rounded to even), so a separate multiply and add
    gives 0; one fused multiply-add keeps it: 2^-24."""
    a = torch.full((32,), 1 + 2.0 ** -12)
    return a, a.clone(), torch.full((32,), -(1 + 2.0 ** -11)), torch.zeros(32)


@pytest.mark.skipif(not FMA_FLAGS, reason="this CPU has no fused multiply-add")
def test_a_times_b_plus_c_is_one_fma_as_nvcc_compiles_it(ext):
    """nvcc contracts a·b + c into FFMA unless told --fmad=false; so does the
    emulator's build (learners' SIMT matmuls failed their own tolerance without)."""
    a, b, c, out = _fma_case()
    ext.run("fma", [a, b, c, out], 0)
    assert (out == 2.0 ** -24).all()
    unfused = ab.compile("ptx_probe_unfused", (HERE / "ptx_probe.cu").read_text(),
                         (HERE / "ptx_probe_wrapper.cpp").read_text(), ["run"],
                         backend="emulator", extra_cflags=["-ffp-contract=off"])
    unfused.run("fma", [a, b, c, out], 0)
    assert (out == 0).all()


def test_nvccs_fmad_false_turns_contraction_off():
    for flags in (["--fmad=false"], ["-O3", "-fmad=false"], ["--fmad", "false"]):
        assert fmad_off(flags) == ["-ffp-contract=off"]
    for flags in ([], ["--fmad=true"], ["-O3"], ["--use_fast_math"]):
        assert fmad_off(flags) == []


def test_small_instructions(ext):
    x = torch.arange(128, dtype=torch.float32)
    out = torch.zeros(32, 8)
    ext.run("misc", [x, out], 0)
    lane = torch.arange(32)
    assert torch.equal(out[:, 0], lane.float())
    assert torch.equal(out[:, 1], 2.0 ** (lane // 8).float())
    assert torch.equal(out[:, 2], ((lane ^ 5) * 10).float())
    assert torch.equal(out[:, 3], torch.full((32,), 70.0))
    nxt = (lane + 1) % 32
    assert torch.equal(out[:, 4], x.view(32, 4)[nxt, 2])
    assert torch.equal(out[:, 5], x.view(32, 4)[nxt, 3])
    assert torch.equal(out[:, 6], 2.0 * lane + 0.5)
    assert torch.equal(out[:, 7], torch.where(lane < 16, 1.0, -1.0))


def test_128_bit_registers_load_move_and_store(ext):
    x = torch.randint(-2**62, 2**62, (64,), generator=torch.Generator().manual_seed(5))
    out = torch.zeros(64, dtype=torch.int64)
    ext.run("b128", [x, out], 0)
    assert torch.equal(out, x.view(32, 2).flip(1).flatten())


def test_an_unsupported_instruction_in_a_header_names_the_header_and_its_line(tmp_path):
    (tmp_path / "helpers.cuh").write_text(
        '#pragma once\n__device__ void fence() {\n'
        '  asm volatile("tcgen05.fence::before_thread_sync;");\n}\n')
    src = '#include "helpers.cuh"\n__global__ void k() { fence(); }\n'
    with pytest.raises(ab.CompileError, match=r"line 3 of helpers\.cuh: inline PTX "
                                              r"'tcgen05\.fence::before_thread_sync'"):
        ab.compile("ptx_in_header", src, "", [], backend="emulator",
                   include_dirs=[tmp_path])


def test_scalar_arithmetic(ext):
    a, b, c = 0x12345678, 0x9ABCDEF0 - 2**32, 0x0F0F0F0F
    x, y = 1.5, -2.25
    bits = torch.tensor([x, y]).view(torch.int32).tolist()
    out = torch.zeros(10, dtype=torch.int32)
    ext.run("arith", [torch.tensor([a, b, c, *bits], dtype=torch.int32), out], 0)
    u = [v % 2**32 for v in out.tolist()]
    ua, ub = a % 2**32, b % 2**32
    assert u[0] == (ua + ub) % 2**32
    assert u[1] == ua * ub >> 32 and u[2] | u[3] << 32 == ua * ub
    assert u[4] == (a * b + c) % 2**32
    assert out[5:7].view(torch.float32).tolist() == [x * y + 1, x]   # NaN ignored
    assert u[7] == ua ^ ub ^ c
    assert u[8] == int.from_bytes(bytes([ua & 0xFF, ub & 0xFF, ua >> 8 & 0xFF,
                                         ub >> 8 & 0xFF]), "little")
    assert out[9] == -c >> 4


@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle"])
def test_named_barriers_order_a_producer_and_consumers(ext, order):
    x = torch.randn(4 * 32, generator=torch.Generator().manual_seed(4))
    out = torch.zeros(4 * 64)
    with ab.thread_order(order):
        ext.run("named_barriers", [x, out], 4)
    tiles = x.view(4, 32)
    want = torch.stack([tiles.roll(-1, 1), tiles.roll(-2, 1)], 1)
    assert torch.equal(out.view(4, 2, 32), want)


def test_named_barriers_order_accesses_for_racecheck(ext):
    x = torch.randn(4 * 32, generator=torch.Generator().manual_seed(4))
    out = torch.zeros(4 * 64)
    with ab.sanitize():   # the producer and consumers above: clean
        ext.run("named_barriers", [x, out], 4)
    tiles = x.view(4, 32)
    assert torch.equal(out.view(4, 2, 32),
                       torch.stack([tiles.roll(-1, 1), tiles.roll(-2, 1)], 1))
    with ab.sanitize(), pytest.raises(ab.RaceError) as info:
        ext.run("named_barrier_race", [x, torch.zeros(64)], 0)
    lines = (HERE / "ptx_probe.cu").read_text().splitlines()
    at = {m: f"cell.cu:{lines.index(t) + 1}" for t in lines
          for m in ("tile-write", "unordered-read") if t.endswith(f"// @{m}")}
    assert info.value.hazard == "read-after-write"
    assert info.value.sites == (at["tile-write"], at["unordered-read"])


@pytest.mark.parametrize("asm,name", [
    ('asm volatile("tcgen05.fence::before_thread_sync;\\n" ::: "memory");',
     "tcgen05.fence::before_thread_sync"),
    ('asm("bar.red.popc.u32 %0, 0, %1;" : "=r"(x) : "r"(x));', "bar.red.popc.u32"),
    ('asm("add.rz.f32 %0, %1, 1.0;" : "=f"(y) : "f"(y));', "add.rz.f32"),
    ('asm("mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%0}, {%1}, {%2}, {%3};"'
     ' : "=r"(x) : "r"(x), "r"(x), "r"(x));', "mma.sync.aligned.m16n8k64"),
])
def test_unsupported_instruction_is_named(asm, name):
    src = f"__global__ void k(int x, float y) {{\n  {asm}\n}}\n"
    with pytest.raises(SyntaxError, match=f"line 2: inline PTX '{name}.*not supported"):
        ptx_transform.to_cpp(src)
    with pytest.raises(ab.CompileError, match=f"inline PTX '{name}"):
        ab.compile("ptx_unsupported", src, "", [], backend="emulator")


def test_transform_keeps_lines_and_ignores_strings_and_comments():
    src = ('// asm("nonsense");\nconst char* s = "asm(\\"x\\")";\n'
           'asm volatile("mov.u32 %0, %%laneid;"\n             : "=r"(x));\nint y;\n')
    out = ptx_transform.to_cpp(src)
    assert out.count("\n") == src.count("\n")
    assert out.splitlines()[4] == "int y;" and "laneid()" in out.splitlines()[2]
