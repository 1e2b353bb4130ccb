"""Hopper's asynchronous instructions on the emulator (tests/cuda/hopper_probe.cu, built
for sm_90a): mbarrier phases and transaction bytes, elect.sync, setmaxnreg, TMA, wgmma,
each against the PTX ISA's definitions and layout tables, in every thread order. The
tests that take `probe` run on an H100/H200 too (``-m cuda`` where there is one): the
same kernels and expectations, so that the hardware checks the emulator's reading of
the ISA."""
import functools
import pathlib

import pytest
import torch

import attnbook as ab
from attnbook.reference import fragments as ptx
from cuda_emulator import ptx as ptx_transform

HERE = pathlib.Path(__file__).parents[1] / "cuda"
ORDERS = ["forward", "reverse", "shuffle"]


@functools.cache
def build(backend):
    return ab.compile("hopper_probe", (HERE / "hopper_probe.cu").read_text(),
                      (HERE / "hopper_probe_wrapper.cpp").read_text(), ["run"],
                      backend=backend, arch="sm_90a")


@pytest.fixture
def ext():
    """The probes on the emulator: what only it shows (thread orders, the sanitizer,
    what the ISA leaves undefined)."""
    return build("emulator")


@pytest.fixture
def probe(device):
    """The probes on a device: the emulator, or a Hopper GPU, where the same tests
    check the emulator's reading of the ISA against the hardware."""
    if device == "cuda" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the probes are sm_90a code: they need an H100 or H200")
    return build("emulator" if device == "cpu" else "cuda"), device


def run(probe, name, tensors, a0, a1, geometry=(), host=()):
    """Run a probe on its device: the tensors go there and their values come back
    (those at the indices `host` stay in host memory: the launcher writes them)."""
    module, device = probe
    moved = [t if device == "cpu" or i in host else t.to(device)
             for i, t in enumerate(tensors)]
    module.run(name, moved, a0, a1, list(geometry))
    for t, m in zip(tensors, moved):
        if m is not t:
            t.copy_(m.cpu())


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("consumers", [1, 3])
def test_an_mbarrier_ring_passes_slots_between_a_producer_and_consumers(
        probe, order, consumers):
    rounds = 7
    x = torch.randn(rounds * 32, generator=torch.Generator().manual_seed(1))
    out = torch.zeros(consumers * 32)
    with ab.thread_order(order):
        run(probe, "mbarrier_ring", [x, out], rounds, consumers)
    want = x.view(rounds, 32).sum(0)
    torch.testing.assert_close(out.view(consumers, 32), want.expand(consumers, 32))


def test_the_ring_is_racecheck_clean_and_a_missing_wait_is_a_race(ext):
    x = torch.randn(4 * 32, generator=torch.Generator().manual_seed(2))
    out = torch.zeros(64)
    with ab.sanitize():
        ext.run("mbarrier_ring", [x, out], 4, 2, [])
    torch.testing.assert_close(out.view(2, 32), x.view(4, 32).sum(0).expand(2, 32))
    with ab.sanitize(), pytest.raises(ab.RaceError) as info:
        ext.run("mbarrier_skip_wait", [x, out], 4, 2, [])
    assert info.value.hazard in ("read-after-write", "write-after-read")


def test_a_phase_that_cannot_complete_is_a_deadlock(ext):
    with pytest.raises(RuntimeError, match=r"deadlock: 32 threads wait on an mbarrier "
                                           r"\(line \d+\) whose phase cannot complete"):
        ext.run("mbarrier_stuck", [torch.zeros(32)], 0, 0, [])
    with pytest.raises(RuntimeError, match=r"mbarrier.arrive on line \d+: 100 arrivals "
                                           "on a phase that awaits 64 more"):
        ext.run("mbarrier_stuck", [torch.zeros(32)], 1, 0, [])


def test_a_tma_box_past_the_shared_memory_is_a_memcheck_error(ext):
    tensor, geometry = tma_case(64, 64, 64, 8, 128, 0, 0)
    out = torch.zeros(64 * 8, dtype=torch.float16)
    rc = torch.zeros(1, dtype=torch.int32)
    with ab.sanitize(), pytest.raises(ab.MemcheckError, match="dynamic shared memory"):
        ext.run("tma_load", [tensor, out, rc], 1, 0, geometry + [512])


@pytest.mark.parametrize("mask", [0xFFFFFFFF, 0xFFFF0000, 0x00000100])
def test_elect_sync_elects_the_lowest_lane_of_the_mask(probe, mask):
    out = torch.full((64,), -1, dtype=torch.int32)
    run(probe, "elect", [out], mask - (1 << 32) * (mask >= 1 << 31), 0)
    lanes = [lane for lane in range(32) if mask >> lane & 1]
    for lane in range(32):
        if lane in lanes:
            assert out[lane] == lanes[0]
            assert out[32 + lane] == int(lane == lanes[0])
        else:
            assert out[lane] == out[32 + lane] == -1


def test_setmaxnreg_takes_a_multiple_of_8_in_24_to_256(probe):
    out = torch.zeros(256)
    run(probe, "setmaxnreg", [out], 0, 0)
    assert torch.equal(out, torch.arange(256.))
    for count in (20, 260, 100):   # ptxas refuses these too
        src = ("__global__ void k() {\n  asm volatile(\"setmaxnreg.inc.sync.aligned"
               f".u32 {count};\");\n}}\n")
        with pytest.raises(SyntaxError, match="line 2: setmaxnreg: the register "
                                              r"count must be a multiple of 8 in "
                                              r"\[24, 256\]"):
            ptx_transform.to_cpp(src)


# ---- wgmma against the ISA's tables ----------------------------------------------
IMAGE = 32768
A_AT, B_AT = 0, 16384        # where the tiles start in the image (on 1 KiB)


def place(image, matrix, start, span, mn_major, lbo, sbo, taken):
    """Write `matrix` (MN x 16, 16-bit) into the byte image in the canonical layout."""
    bits = matrix.view(torch.int16)
    for mn in range(matrix.shape[0]):
        for k in range(16):
            a = ptx.wgmma_address(start, mn, k, span, mn_major, lbo, sbo)
            assert a not in taken and a + 2 <= IMAGE
            taken.add(a)
            image[a // 2] = bits[mn, k]


def descriptor(start, span, lbo, sbo):
    """A matrix descriptor (PTX ISA, "Matrix Descriptor Format")."""
    layout = {0: 0, 128: 1, 64: 2, 32: 3}[span]
    d = (start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | layout << 62
    return d - (1 << 64) * (d >> 63)                   # as an int64


def strides(span, mn_major, rows):
    """(lbo, sbo) in bytes for a tile of `rows` x 16 elements within 8 KiB, with gaps
    between core matrices or swizzle atoms where they fit, so that a stride read as
    the other lands elsewhere."""
    if not mn_major:
        return (128, 320) if span == 0 else (16, 1024)   # K-major: LBO unused swizzled
    if span == 0:
        return 16 * rows + 64, 128                      # MN-major: SBO along MN
    atoms = -(-rows * 2 // span)                         # of span bytes along MN
    return 16 * span, 16 * span * atoms + 8 * span


def wgmma_case(n, dtype, a_major, b_major, span, seed, two=False, a_regs=False):
    """Random A (64 x 16k), B (16k x N) and C; the image, descriptors and registers."""
    g = torch.Generator().manual_seed(seed)
    slices = 2 if two else 1
    A = torch.randn(slices, 64, 16, generator=g).to(dtype)
    B = torch.randn(slices, n, 16, generator=g).to(dtype)   # (n, k): B transposed
    C = torch.randn(64, n, generator=g)
    image = torch.zeros(IMAGE // 2, dtype=torch.int16)
    descs = []
    for s in range(slices):
        taken = set()
        a_at, b_at = A_AT + 8192 * s, B_AT + 8192 * s
        la, sa = strides(span, a_major, 64)
        lb, sb = strides(span, b_major, n)
        if not a_regs:
            place(image, A[s], a_at, span, a_major, la, sa, taken)
        place(image, B[s], b_at, span, b_major, lb, sb, taken)
        descs += [descriptor(a_at, span, la, sa), descriptor(b_at, span, lb, sb)]
    regs = torch.zeros(2, 128, 4, dtype=torch.int32)
    bits = A.view(torch.int16).to(torch.int32) & 0xFFFF
    for s in range(slices):
        for t in range(128):
            for i in range(8):
                row, k = ptx.a_m64k16(t, i)
                regs[s, t, i // 2] |= bits[s, row, k] << (16 * (i % 2))
    words = torch.tensor(descs + [0] * (4 - len(descs)), dtype=torch.int64)
    args = torch.cat([words.view(torch.int32), regs.flatten()])
    c = torch.zeros(128, n // 2)
    for t in range(128):
        for i in range(n // 2):
            c[t, i] = C[ptx.d_m64nN(t, i)]
    return A, B, C, image, args, c


def gather(d, n):
    D = torch.zeros(64, n)
    for t in range(128):
        for i in range(n // 2):
            D[ptx.d_m64nN(t, i)] = d[t, i]
    return D


# variant: (N, dtype, A MN-major, B MN-major, scale of A, of B, A in registers)
VARIANTS = {0: (8, torch.float16, False, False, 1, 1, False),
            1: (8, torch.float16, True, False, 1, 1, False),
            2: (8, torch.float16, False, True, 1, 1, False),
            3: (8, torch.float16, True, True, -1, 1, False),
            4: (64, torch.bfloat16, False, False, 1, 1, False),
            5: (64, torch.bfloat16, True, True, 1, 1, False),
            6: (64, torch.float16, False, False, 1, -1, True),
            7: (64, torch.float16, False, True, 1, -1, True)}


def run_wgmma(probe, v, span, kind=0, seed=0):
    n, dtype, a_mn, b_mn, sa, sb, a_regs = VARIANTS[v]
    A, B, C, image, args, c = wgmma_case(n, dtype, a_mn, b_mn, span, seed,
                                         two=bool(kind & 2), a_regs=a_regs)
    early = torch.zeros(128)
    run(probe, f"wgmma_n{n}", [image, args, c, early], v, kind | a_regs)
    want = sum((sa * A[s].double()) @ (sb * B[s].double()).T
               for s in range(A.shape[0]))
    if not kind & 4:
        want = want + C.double()
    return gather(c, n), want.float(), early


@pytest.mark.parametrize("span", [0, 32, 64, 128])
@pytest.mark.parametrize("v", list(VARIANTS))
def test_wgmma_against_the_isa_tables(probe, v, span):
    D, want, _ = run_wgmma(probe, v, span)
    torch.testing.assert_close(D, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("order", ORDERS)
def test_wgmma_chains_two_k_slices_and_scale_d_0_drops_c(probe, order):
    with ab.thread_order(order):
        D, want, _ = run_wgmma(probe, 4, 128, kind=2 | 4, seed=3)
    torch.testing.assert_close(D, want, rtol=1e-5, atol=1e-4)
    with ab.thread_order(order):
        D, want, _ = run_wgmma(probe, 6, 64, kind=2, seed=4)
    torch.testing.assert_close(D, want, rtol=1e-5, atol=1e-4)


def test_an_accumulator_read_before_the_wait_is_nan(ext):
    D, want, early = run_wgmma((ext, "cpu"), 0, 128, kind=8)
    torch.testing.assert_close(D, want, rtol=1e-5, atol=1e-4)
    assert early.isnan().all()


def test_a_wgmma_without_a_fence_is_an_error(ext):
    with pytest.raises(RuntimeError, match="no wgmma.fence since the warpgroup"):
        run_wgmma((ext, "cpu"), 0, 128, kind=16)


# ---- TMA: tensor tiles between global and shared memory ---------------------------
def tma_case(rows, cols, box_cols, box_rows, span, x, y, seed=0):
    g = torch.Generator().manual_seed(seed)
    pitch = -(-cols // 8) * 8 + 8                       # 16-byte rows, with padding
    tensor = torch.randn(rows, pitch, generator=g).half()
    geometry = [rows, cols, pitch, box_cols, box_rows, ptx.SWIZZLES[span]]
    return tensor, geometry + [0, x, y]


def box_places(box_cols, box_rows, span):
    """(row, col) of the box -> its 16-bit slot in shared memory, swizzled."""
    return {(r, c): ptx.swizzle(2 * (r * box_cols + c), span) // 2
            for r in range(box_rows) for c in range(box_cols)}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("span,box_cols,box_rows,x,y,fill", [
    (0, 8, 4, 0, 0, 0), (128, 64, 8, 8, 3, 0), (64, 32, 16, -8, -5, 0),
    (32, 16, 16, 40, 30, 1), (128, 64, 9, 24, 0, 1)])
def test_a_tma_load_places_the_box_swizzled_and_fills_out_of_bounds(
        probe, order, span, box_cols, box_rows, x, y, fill):
    rows, cols = 37, 60
    tensor, geometry = tma_case(rows, cols, box_cols, box_rows, span, x, y)
    geometry[6] = fill
    out = torch.zeros(box_cols * box_rows, dtype=torch.float16)
    rc = torch.zeros(1, dtype=torch.int32)
    with ab.thread_order(order):
        run(probe, "tma_load", [tensor, out, rc], 1, 0, geometry, host=[2])
    assert rc.item() == 0
    outside = float("nan") if fill else 0.0
    for (r, c), slot in box_places(box_cols, box_rows, span).items():
        gy, gx = y + r, x + c
        want = tensor[gy, gx].item() if 0 <= gy < rows and 0 <= gx < cols else outside
        got = out[slot].item()
        assert got == want or (want != want and got != got), (r, c)


def test_a_tma_load_is_racecheck_clean_and_lands_at_the_wait_in_reverse_order(ext):
    tensor, geometry = tma_case(64, 64, 64, 8, 128, 0, 0)
    out = torch.zeros(64 * 8, dtype=torch.float16)
    rc = torch.zeros(1, dtype=torch.int32)
    with ab.sanitize():
        ext.run("tma_load", [tensor, out, rc], 1, 0, geometry)
    assert not out.isnan().any()
    with ab.thread_order("reverse"):   # no wait: the box has not landed yet
        ext.run("tma_load", [tensor, out, rc], 0, 0, geometry)
    assert out.isnan().all()


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("span,box_cols,box_rows,x,y", [
    (0, 8, 8, 4, 2), (128, 64, 8, 0, 32), (64, 32, 4, 40, -1)])
def test_a_tma_store_writes_the_box_in_bounds_only(probe, order, span, box_cols,
                                                   box_rows, x, y):
    rows, cols = 35, 60
    tensor, geometry = tma_case(rows, cols, box_cols, box_rows, span, x, y)
    before = tensor.clone()
    box = torch.randn(box_rows * box_cols,
                      generator=torch.Generator().manual_seed(7)).half()
    rc = torch.zeros(1, dtype=torch.int32)
    with ab.thread_order(order):
        run(probe, "tma_store", [tensor, box, rc], 0, 0, geometry, host=[2])
    assert rc.item() == 0
    want = before.clone()
    for (r, c), slot in box_places(box_cols, box_rows, span).items():
        if 0 <= y + r < rows and 0 <= x + c < cols:
            want[y + r, x + c] = box[slot]
    assert torch.equal(tensor, want)


@pytest.mark.parametrize("change,why", [
    ({3: 72}, "wider than the swizzle"), ({2: 61}, "stride is not a multiple of 16"),
    ({3: 4}, "multiple of 16 bytes"), ({4: 257}, "box dimension is 0 or above 256")])
def test_cu_tensor_map_encode_tiled_refuses_what_the_driver_refuses(ext, capfd, change,
                                                                     why):
    tensor, geometry = tma_case(16, 64, 64, 8, 128, 0, 0)
    for i, value in change.items():
        geometry[i] = value
    rc = torch.zeros(1, dtype=torch.int32)
    ext.run("tma_load", [tensor, torch.zeros(1024), rc], 1, 0, geometry)
    assert rc.item() == 1                                # CUDA_ERROR_INVALID_VALUE
    assert why in capfd.readouterr().err


def test_the_sanitizer_reports_an_accumulator_read_before_the_wait(ext):
    with ab.sanitize():   # the same wgmma, read after its wait: clean
        D, want, _ = run_wgmma((ext, "cpu"), 6, 128, kind=2)
    torch.testing.assert_close(D, want, rtol=1e-5, atol=1e-4)
    with ab.sanitize(), pytest.raises(ab.MemcheckError,
                                      match=r"read .* is an accumulator of the "
                                            r"wgmma\.mma_async on line \d+, in flight"):
        run_wgmma((ext, "cpu"), 0, 128, kind=8)


def test_a_tma_store_is_sanitizer_clean(ext):
    rows, cols, x, y = 35, 60, 0, 30
    tensor, geometry = tma_case(rows, cols, 64, 8, 128, x, y)
    want = tensor.clone()
    box = torch.randn(64 * 8, generator=torch.Generator().manual_seed(8)).half()
    rc = torch.zeros(1, dtype=torch.int32)
    with ab.sanitize():
        ext.run("tma_store", [tensor, box, rc], 0, 0, geometry)
    for (r, c), slot in box_places(64, 8, 128).items():
        if y + r < rows and c < cols:
            want[y + r, x + c] = box[slot]
    assert torch.equal(tensor, want)


@pytest.mark.parametrize("order", ORDERS)
def test_a_bulk_copy_and_arrivals_complete_a_phase_that_test_wait_sees(probe, order):
    """cp.async.bulk's bytes and 128 arrivals (64 of them arrive_drop) complete phase
    0, seen by test_wait with each thread's state; phase 1 then needs only the 64
    arrivals the drop left."""
    n = 4096
    x = torch.randint(-2**31, 2**31, (n // 4,), dtype=torch.int32,
                      generator=torch.Generator().manual_seed(9))
    out = torch.zeros(n // 4 + 4, dtype=torch.int32)
    with ab.thread_order(order):
        run(probe, "bulk_copy", [x, out], n, 0)
    assert torch.equal(out[:n // 4], x)
    assert out[n // 4:].tolist() == [1, 2, 3, 4]
