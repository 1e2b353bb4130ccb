"""The occupancy rules against values of CUDA's occupancy calculator, and the
diagrams."""
import matplotlib
import pytest

import attnbook as ab
from attnbook.figures import diagrams

matplotlib.use("Agg")


@pytest.mark.parametrize("regs,smem,threads,arch,blocks,bound,occupancy", [
    (32, 0, 256, "sm_80", 8, "registers", 1.0),        # 1024 registers a warp: 64 warps
    (64, 0, 128, "sm_80", 8, "registers", 0.5),
    (232, 16384, 64, "sm_80", 4, "registers", 0.125),  # chapter 7's kernel at d = 64
    (32, 48 * 1024, 256, "sm_80", 3, "shared memory", 0.375),   # 49 KB + 1 KB reserved
    (32, 0, 256, "sm_75", 4, "threads", 1.0),          # Turing: 1024 threads an SM
    (16, 0, 32, "sm_90", 32, "blocks", 0.5),           # at most 32 blocks an SM
    (33, 0, 32, "sm_80", 32, "blocks", 0.5),           # 33 × 32 rounds up to 1280
])
def test_occupancy_calculator(regs, smem, threads, arch, blocks, bound, occupancy):
    occ = ab.occupancy(regs, smem, threads, arch)
    assert occ["blocks"] == blocks and bound in occ["bound_by"]
    assert occ["occupancy"] == pytest.approx(occupancy)


def test_occupancy_rejects_unknown_architectures():
    with pytest.raises(ValueError, match="arch must be one of"):
        ab.occupancy(32, 0, 256, "sm_99")


def test_diagrams_draw():
    assert len(diagrams.score_grid(sq=40, sk=56).patches) > 12   # 3 × 4 blocks and more
    assert diagrams.gemm_tiles().patches and diagrams.flash_schedule().patches
    ax = diagrams.roofline("A100-SXM4-80GB",
                           points=[("x", 16.0, None), ("y", 100.0, 5.0)])
    fp32 = ax.lines[0].get_ydata()
    assert max(fp32) == pytest.approx(19.5)                       # the fp32 roof
    bars = diagrams.occupancy_bars(232, 16384, 64).patches
    assert [b.get_height() for b in bars[:3]] == [4, 4, 4]        # registers, per arch
    matplotlib.pyplot.close("all")


def test_the_roofline_reaches_past_every_point():
    """Appendix B's H200 points lie at 8192 FLOP/B, twice as far as the default axis."""
    ax = diagrams.roofline("H200", points=[("far", 8192.0, 150.0)])
    assert max(ax.lines[0].get_xdata()) >= 2 * 8192
    assert max(diagrams.roofline("T4").lines[0].get_xdata()) == 2 ** 12
    matplotlib.pyplot.close("all")


def test_tensor_core_diagrams_draw_every_element_once():
    ax = diagrams.mma_fragments(16)
    assert len(ax.patches) == 16 * 16 + 16 * 8 + 16 * 8 + 4     # A, B, C and the legend
    cells = {(p.get_x(), p.get_y()) for p in ax.patches}
    assert len(cells) == len(ax.patches)                        # no element drawn twice
    assert len(diagrams.mma_fragments(8).patches) == 16 * 8 + 8 * 8 + 16 * 8 + 2
    assert len(diagrams.ldmatrix_fragment().patches) == 4 + 4 * 64
    plain = [[64 * r + 8 * c for c in range(8)] for r in range(8)]
    swizzled = [[64 * r + 8 * (c ^ r) for c in range(8)] for r in range(8)]
    texts = [t.get_text() for a in diagrams.bank_groups(plain, swizzled)
             for t in a.texts]
    assert any("8-way" in t for t in texts) and any("no conflict" in t for t in texts)
    matplotlib.pyplot.close("all")


def test_the_hopper_diagrams_draw_each_thread_and_phase():
    """wgmma's accumulators: warp 0's 16 x 16 cells, each thread's 8 where d_m64nN
    (tested against the ISA's tables) puts them, and a box per other warp; the
    pipeline: tile i waits on buffer i % 2's barrier with parity i // 2 % 2."""
    ax = diagrams.wgmma_accumulators(16)
    assert len(ax.patches) == 16 * 16 + 3
    cells = {(p.get_x(), p.get_y()) for p in ax.patches[:256]}
    assert len(cells) == 256
    where = {(c, r): t for t in range(32) for r, c in
             (ab.reference.fragments.d_m64nN(t, i) for i in range(8))}
    shown = {(round(x), round(y)): int(t.get_text())
             for x, y, t in ((t.get_position()[0] - 0.5, t.get_position()[1] - 0.5, t)
                             for t in ax.texts) if t.get_text().isdigit()}
    assert shown == where
    texts = [t.get_text() for t in diagrams.hopper_pipeline(tiles=4).texts]
    assert [t for t in texts if "parity" in t] == [
        "tile 0: wait\nbar[1], parity 0", "tile 1: wait\nbar[2], parity 0",
        "tile 2: wait\nbar[1], parity 1", "tile 3: wait\nbar[2], parity 1"]
    matplotlib.pyplot.close("all")


def test_the_warp_specialized_figure_labels_the_kernels_waits():
    """Step 3's figure: both consumers wait for tile i's fill, full[i % 2] parity
    i // 2 % 2; the producer refills buffer i % 2 for tile i after its release of tile
    i - 2, empty[i % 2] parity i // 2 - 1 (steps 3-4's waits, written out)."""
    texts = [t.get_text() for t in diagrams.warp_specialized(tiles=5).texts]
    waits = ["tile 0: wait full[0]\nparity 0", "tile 1: wait full[1]\nparity 0",
             "tile 2: wait full[0]\nparity 1", "tile 3: wait full[1]\nparity 1",
             "tile 4: wait full[0]\nparity 0"]
    assert [t for t in texts if t.startswith("tile")] == [w for w in waits
                                                           for _ in range(2)]
    assert [t for t in texts if "after" in t] == [
        "K, V 2 → buffer 0, after\nempty[0] parity 0",
        "K, V 3 → buffer 1, after\nempty[1] parity 0",
        "K, V 4 → buffer 0, after\nempty[0] parity 1"]
    matplotlib.pyplot.close("all")


def test_backward_schedule_skips_the_masked_tiles():
    axes = diagrams.backward_schedule(tiles_q=4, tiles_k=5)
    for a in axes:
        labels = [t.get_text() for t in a.texts if "," in t.get_text() and
                  len(t.get_text()) <= 3]
        assert len(labels) == 4 * 5 - 6                  # 6 tiles above the diagonal
    matplotlib.pyplot.close("all")


def test_the_gpu_figure_draws_every_sm_and_the_devices_table():
    from attnbook.toolchain.devices import GPUS
    for name, gpu in GPUS.items():
        ax = diagrams.gpu_hierarchy(name)
        sms = [p for p in ax.patches if p.get_width() == pytest.approx(0.56)]
        assert len(sms) == gpu.sms
        text = "\n".join(t.get_text() for t in ax.texts)
        assert f"{gpu.l2_mb} MB, shared by all SMs" in text
        for other in GPUS.values():   # the table of all three
            assert f"{other.arch:>7s}{other.sms:6d}" in text


def test_ping_pong_alternates_the_consumers_chains():
    """Step 4's figure: the tensor cores run the chains in the kernel's turn order, and
    each softmax runs beside the other consumer's chain, never its own."""
    ax = diagrams.ping_pong(tiles=2)
    boxes = {t.get_text(): t.get_position()[0] for t in ax.texts}
    chains = sorted((x, t) for t, x in boxes.items() if t[:3] in ("0: ", "1: "))
    assert [t for _, t in chains] == [
        "0: QKᵀ 0", "1: QKᵀ 0", "0: PV 0", "1: PV 0",
        "0: QKᵀ 1", "1: QKᵀ 1", "0: PV 1", "1: PV 1"]
    softmax = [(p.get_x(), p.get_y()) for p in ax.patches if p.get_y() < 2]
    assert softmax == [(1.0, 1.1), (2.0, 0.0), (5.0, 1.1), (6.0, 0.0)]
    assert [t for x, t in chains if x - 0.5 in (1.0, 5.0)] == ["1: QKᵀ 0", "1: QKᵀ 1"]
    assert [t for x, t in chains if x - 0.5 in (2.0, 6.0)] == ["0: PV 0", "0: PV 1"]
    matplotlib.pyplot.close("all")
