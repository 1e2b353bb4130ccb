"""Diagrams of the hardware and of how kernels map threads to data: chapter 2's GPU and
its grid over the scores,
chapter 4's tiles through shared memory, chapter 7's query tiles and K/V stream, chapter
8's tensor-core fragments and shared-memory banks, chapter 11's backward loops, chapter
12's warpgroup accumulators and copy pipeline; a roofline; and the occupancy limits of
a kernel."""
from __future__ import annotations

import math

import matplotlib.patches as patches
import matplotlib.pyplot as plt

from ..bench.harness import PEAKS
from ..reference import fragments
from ..toolchain.devices import GPUS
from ..toolchain.occupancy import ARCHITECTURES, occupancy

__all__ = ["gpu_hierarchy", "score_grid", "gemm_tiles", "flash_schedule", "roofline",
           "occupancy_bars", "mma_fragments", "ldmatrix_fragment", "bank_groups",
           "backward_schedule", "wgmma_accumulators", "hopper_pipeline",
           "warp_specialized", "ping_pong"]

BLUE, ORANGE, GREEN, GREY = "#4c72b0", "#dd8452", "#55a868", "#d0d0d0"


def _box(ax, x, y, w, h, color, label=None, alpha=1.0, **text):
    ax.add_patch(patches.Rectangle((x, y), w, h, facecolor=color, edgecolor="black",
                                   linewidth=0.6, alpha=alpha))
    if label:
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center",
                **{"fontsize": 8, **text})


def _frame(ax, w, h, title, top=-1.5):
    ax.set_xlim(-0.5, w + 0.5)
    ax.set_ylim(h + 0.5, top)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=9)

def _timeline(ax, xlim, ylim, title):
    """A schematic timeline's frame: no ticks, time along the bottom axis."""
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel("time (schematic) →")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(title, fontsize=9)
    return ax


def gpu_hierarchy(gpu="A100", ax=None):
    """What a kernel runs on: ``gpu``'s SMs, each with its warps, register file and
    shared memory, the L2 cache they share and the DRAM behind it, and the same figures
    for every GPU of :data:`~attnbook.toolchain.devices.GPUS` (datasheet values)."""
    g = GPUS[gpu]
    sm = ARCHITECTURES[g.arch]
    ax = ax or plt.subplots(figsize=(9.5, 5.6))[1]
    ax.set_xlim(0, 19)
    ax.set_ylim(11.2, 0)
    ax.axis("off")
    cols = 12
    rows = math.ceil(g.sms / cols)
    _box(ax, 0.2, 0.2, 8.4, 6.4, "white")
    ax.text(4.4, 0.6, f"{g.name}: {g.sms} SMs", ha="center", fontsize=9)
    for i in range(g.sms):
        _box(ax, 0.5 + (i % cols) * 0.66, 1.0 + (i // cols) * 3.3 / rows, 0.56,
             3.0 / rows, ORANGE if i == 0 else BLUE, alpha=1.0 if i == 0 else 0.45)
    _box(ax, 0.5, 4.6, 7.8, 0.8, GREY, f"L2 cache, {g.l2_mb} MB, shared by all SMs")
    _box(ax, 0.5, 7.2, 7.8, 1.0, GREEN,
         f"DRAM ({g.memory}): {g.memory_gb} GB, {g.bandwidth_gbs / 1e3:.2f} TB/s",
         alpha=0.6)
    ax.annotate("", (4.4, 7.2), (4.4, 5.4), arrowprops=dict(arrowstyle="<->"))
    # one SM, enlarged
    _box(ax, 10.0, 0.2, 8.6, 6.4, "white")
    ax.text(14.3, 0.6, "one SM (orange)", ha="center", fontsize=9)
    ax.plot([0.5 + 0.56, 10.0], [1.0, 0.2], color=ORANGE, linewidth=0.8)
    warps = sm["warps"]
    _box(ax, 10.3, 1.0, 8.0, 1.4, BLUE,
         f"up to {warps} resident warps of 32 threads ({32 * warps} threads),\n"
         f"{sm['blocks']} blocks; a block runs on one SM", alpha=0.45)
    regs = sm["registers"]
    _box(ax, 10.3, 2.6, 8.0, 1.1, ORANGE,
         f"registers: {regs // 1024}K × 32 bit ({regs // 256} KB)", alpha=0.6)
    _box(ax, 10.3, 3.9, 8.0, 1.1, GREEN,
         f"shared memory: up to {sm['shared'] // 1024} KB, for the block's threads",
         alpha=0.6)
    _box(ax, 10.3, 5.2, 8.0, 1.1, GREY, "tensor cores and CUDA cores")
    header = f"{'':6s}{'arch':>7s}{'SMs':>6s}{'smem/SM':>9s}{'L2':>7s}{'DRAM':>16s}"
    lines = [header] + [
        f"{d.name:6s}{d.arch:>7s}{d.sms:6d}"
        f"{ARCHITECTURES[d.arch]['shared'] // 1024:>6d} KB{d.l2_mb:>4d} MB"
        f"{d.memory_gb:>5d} GB {d.bandwidth_gbs / 1e3:4.2f} TB/s"
        for d in GPUS.values()]
    ax.text(0.3, 8.7, "\n".join(lines), family="monospace", fontsize=8.5, va="top")
    return ax


def score_grid(sq=40, sk=56, block=16, ax=None):
    """Chapter 2's scores kernel: the S_q × S_k score matrix covered by a grid of
    block × block thread blocks; threadIdx.x runs along keys, threadIdx.y along queries,
    and the threads of partial blocks past the edge do nothing."""
    ax = ax or plt.subplots(figsize=(6, 4.5))[1]
    gx, gy = -(-sk // block), -(-sq // block)
    _box(ax, 0, 0, gx * block, gy * block, GREY, alpha=0.4)
    _box(ax, 0, 0, sk, sq, "white")
    for by in range(gy):
        for bx in range(gx):
            ax.add_patch(patches.Rectangle((bx * block, by * block), block, block,
                                           fill=False, edgecolor=BLUE, linewidth=1.2))
            ax.text(bx * block + 1, by * block + 2.5, f"block ({bx},{by})", fontsize=7,
                    color=BLUE)
    bx, by = 1, 1                                        # one thread of one block
    tx, ty = 5, 9
    _box(ax, bx * block + tx, by * block + ty, 1, 1, ORANGE)
    ax.annotate(f"thread ({tx},{ty}) of block ({bx},{by}):\ns[i = {by * block + ty}]"
                f"[j = {bx * block + tx}]",
                xy=(bx * block + tx + 1, by * block + ty + 0.5),
                xytext=(gx * block + 3, sq * 0.55), fontsize=8,
                arrowprops=dict(arrowstyle="->"))
    ax.annotate("", xy=(block * 0.9, -0.6), xytext=(0, -0.6),
                arrowprops=dict(arrowstyle="->", color=BLUE))
    ax.text(0, -1.4, "threadIdx.x → keys j (coalesced stores)", fontsize=8, color=BLUE)
    ax.text(-1, sq / 2, "queries i", rotation=90, fontsize=8, va="center", ha="right")
    ax.text(gx * block / 2, gy * block + 1,
            f"S_q = {sq}, S_k = {sk}: threads in grey are "
            "past the edge and return at once", fontsize=8, ha="center", va="top")
    _frame(ax, gx * block + 30, gy * block + 5,
           f"grid ({gx}, {gy}, B·H) of {block}×{block}-thread blocks over the scores",
           top=-3)
    return ax


def gemm_tiles(ax=None):
    """Chapter 4's register-blocked GEMM: a block computes a 64 × 64 tile of C; for each
    k-step a 64 × 16 slab of A and a 16 × 64 slab of B go to shared memory; each of the
    256 threads keeps a 4 × 4 block of C in registers."""
    ax = ax or plt.subplots(figsize=(8, 4.5))[1]
    # B above C, A to its left: the usual picture of C = A · B.
    _box(ax, 14, 0, 16, 8, GREY, alpha=0.5)
    _box(ax, 0, 10, 12, 16, GREY, alpha=0.5)
    _box(ax, 14, 10, 16, 16, GREY, alpha=0.3)
    for x, y, label in ((14.3, 0.9, "B (K × N)"), (0.3, 10.9, "A (M × K)"),
                        (14.3, 10.9, "C (M × N)")):
        ax.text(x, y, label, fontsize=8)
    _box(ax, 18, 14, 6, 6, BLUE, alpha=0.35)             # the block's C tile
    _box(ax, 18, 0, 6, 8, BLUE, alpha=0.15)              # the panels it reads
    _box(ax, 0, 14, 12, 6, BLUE, alpha=0.15)
    _box(ax, 18, 3, 6, 1.5, ORANGE)                      # the current k-step
    ax.text(17.7, 3.9, "Bs", fontsize=8, ha="right")
    _box(ax, 5, 14, 1.5, 6, ORANGE)
    ax.text(5.75, 13.3, "As", fontsize=8, ha="center")
    _box(ax, 20.4, 16.4, 0.6, 0.6, GREEN)                # one thread's 4 × 4 registers
    ax.annotate("a thread's 4 × 4 block of C,\nin registers: 16 FMAs per\n"
                "4 + 4 shared loads", xy=(21, 16.7), xytext=(32, 17), fontsize=8,
                arrowprops=dict(arrowstyle="->"))
    ax.annotate("k-step: 64 × 16 of A and 16 × 64 of B\nloaded once into shared "
                "memory, read by\nall 256 threads, then the next k-step", xy=(24, 3.7),
                xytext=(32, 3), fontsize=8, arrowprops=dict(arrowstyle="->"))
    ax.text(21, 20.8, "block's 64 × 64 tile", fontsize=7, ha="center", color=BLUE)
    _frame(ax, 48, 26, "one thread block of the register-blocked GEMM")
    return ax


def flash_schedule(ax=None):
    """Chapter 7's fused kernel: one block per query tile (of one batch and head); K and
    V tiles stream through shared memory; per thread, a query row, its output row and
    the running (m, ℓ) stay in registers."""
    ax = ax or plt.subplots(figsize=(9, 4.5))[1]
    colors = [BLUE, GREEN, ORANGE, "#8172b3"]
    tiles_q, tiles_k = 4, 6
    for i in range(tiles_q):                             # one block per query tile
        _box(ax, 0, 2 * i, 5, 2, colors[i], f"Q tile {i}\nblock {i}", alpha=0.45)
    for j in range(tiles_k):                             # the key/value tiles
        _box(ax, 7 + 2 * j, -3, 2, 2.4, GREY, f"K, V\n{j}", alpha=0.6)
    for j in range(tiles_k):                             # block 1's sweep, tile by tile
        _box(ax, 7 + 2 * j, 2, 2, 2, colors[1], alpha=0.12 + 0.1 * j)
    ax.annotate("", xy=(7 + 2 * tiles_k, 3), xytext=(7, 3),
                arrowprops=dict(arrowstyle="->"))
    ax.text(7 + tiles_k, 8.6, "block 1 visits every $K, V$ tile in turn and updates\n"
            "its rows' online softmax after each: $S$ and $P$ never leave the chip",
            fontsize=9, ha="center", va="top")
    x = 9 + 2 * tiles_k
    ax.text(x, -1.8, "shared memory: the current $K_j$ and $V_j$\n"
            "($B_c \\times d$ floats each), read by all $B_r$ threads", fontsize=9,
            va="center")
    ax.text(x, 3, "registers, per thread (one query row):\n"
            "$q$ and $o$ ($d$ floats each), $m$, $\\ell$,\n"
            "and the row's $B_c$ scores of the tile", fontsize=9, va="center")
    ax.text(x, 7, "global memory: $Q, K, V$ read; $O$ and $L$ written;\nno "
            "$S_q \\times S_k$ buffer", fontsize=9, va="center")
    _frame(ax, x + 17, 10, "the fused kernel: a block per query tile and (batch, head)",
           top=-3.5)
    return ax


def roofline(gpu="A100-SXM4-80GB", points=(), ax=None):
    """The roofline of ``gpu`` (datasheet peaks of :data:`attnbook.bench.PEAKS`):
    attainable TFLOP/s against arithmetic intensity, fp32 and fp16 tensor-core roofs.
    ``points`` are (label, FLOP per byte, TFLOP/s or None): a measured point, or an
    intensity alone, drawn as a vertical line."""
    peaks = next(p for name, p in PEAKS if name in gpu)
    bw = peaks["bandwidth_gbs"] / 1e3                     # TB/s: TFLOP/s per FLOP/B
    ax = ax or plt.subplots(figsize=(6, 4))[1]
    top = max([2.0 ** 12] + [2 * intensity for _, intensity, _ in points])
    xs = [2 ** (e / 8) for e in range(-16, 8 * math.ceil(math.log2(top)) + 1)]
    for key, label, color in (("fp32_tflops", "fp32", BLUE),
                              ("fp16_tflops", "fp16 tensor cores", ORANGE)):
        ax.plot(xs, [min(peaks[key], bw * x) for x in xs], color=color, label=label)
        ax.annotate(f"ridge {peaks[key] / bw:.0f} FLOP/B",
                    (peaks[key] / bw, peaks[key]), fontsize=7, color=color,
                    xytext=(4, -12), textcoords="offset points")
    for label, intensity, tflops in points:
        if tflops is None:
            ax.axvline(intensity, color=GREY, linestyle="--")
            ax.text(intensity, bw * 0.3, f" {label}", rotation=90, fontsize=7,
                    va="bottom")
        else:
            ax.plot([intensity], [tflops], "o", color=GREEN)
            ax.annotate(label, (intensity, tflops), fontsize=7, xytext=(4, 4),
                        textcoords="offset points")
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="attainable TFLOP/s", title=f"roofline: {gpu}, {bw:.2f} TB/s")
    ax.legend(fontsize=8, loc="upper left")   # the bandwidth roof leaves it empty
    return ax


def occupancy_bars(registers, shared_bytes, threads, ax=None):
    """For each architecture, the resident blocks per SM that registers, shared memory
    and threads each allow; the lowest bar is the limit."""
    ax = ax or plt.subplots(figsize=(7, 3))[1]
    archs = list(ARCHITECTURES)
    kinds = ["registers", "shared memory", "threads", "blocks"]
    width = 0.2
    for n, kind in enumerate(kinds):
        values = [occupancy(registers, shared_bytes, threads, a)["limits"][kind]
                  for a in archs]
        ax.bar([i + (n - 1.5) * width for i in range(len(archs))], values, width,
               label=kind, color=[BLUE, ORANGE, GREEN, GREY][n])
    ax.set_xticks(range(len(archs)),
                  [f"{a}\n{ARCHITECTURES[a]['name']}" for a in archs], fontsize=8)
    ax.set(ylabel="blocks per SM",
           title=f"{threads} threads, {registers} registers, {shared_bytes} B shared")
    ax.legend(fontsize=7)
    return ax


REGISTER_COLORS = [BLUE, ORANGE, GREEN, "#8172b3"]


def _fragment(ax, rows, cols, where, elements, title, x0=0):
    """A rows x cols matrix whose cell (r, c) shows the lane holding it, coloured by the
    register: ``where(lane, i)`` gives element i's (row, col), ``elements`` per lane."""
    for lane in range(32):
        for i in range(elements):
            r, c = where(lane, i)
            _box(ax, x0 + c, r, 1, 1, REGISTER_COLORS[i // 2], str(lane), alpha=0.4,
                 fontsize=7.5)
    ax.text(x0 + cols / 2, -0.6, title, ha="center", fontsize=8)


def mma_fragments(k=16, ax=None):
    """Which lane holds which element of A (16 x k), B (k x 8) and C (16 x 8) for
    mma.sync m16n8k{k}: each cell names its lane, the colour its register."""
    # a third of an inch a cell: two-digit lane numbers stay legible
    ax = ax or plt.subplots(figsize=((k + 21) / 3, 19.5 / 3))[1]
    a = fragments.a_m16n8k16 if k == 16 else fragments.a_m16n8k8
    b = fragments.b_m16n8k16 if k == 16 else fragments.b_m16n8k8
    _fragment(ax, 16, k, a, k // 2, f"A (16 × {k}): {k // 4} registers a lane")
    _fragment(ax, k, 8, b, k // 4, f"B ({k} × 8): {k // 8} register{'s' * (k > 8)}",
              x0=k + 2)
    _fragment(ax, 16, 8, fragments.c_m16n8, 4, "C, D (16 × 8): 4 floats", x0=k + 12)
    for i, color in enumerate(REGISTER_COLORS[:k // 4]):
        _box(ax, 2 + 5 * i, 17, 1, 1, color, alpha=0.4)
        ax.text(3.3 + 5 * i, 17.5, f"register {i}", fontsize=8, va="center")
    _frame(ax, k + 20, 18, f"mma.sync.m16n8k{k}: the lane of each element "
           "(colour: A's and B's register; C's element pair)", top=-1.2)
    return ax


def ldmatrix_fragment(ax=None):
    """ldmatrix.x4: lanes 8m..8m+7 give the addresses of matrix m's rows; every lane
    gets two elements of each matrix, in the A-fragment layout of mma.sync."""
    ax = ax or plt.subplots(figsize=(9, 4.5))[1]
    for m in range(4):
        r0, c0 = 8 * (m % 2), 8 * (m // 2)
        _box(ax, -3 if m < 2 else 16.4, r0 + 0.1, 2.6, 7.8, REGISTER_COLORS[m],
             f"lanes\n{8 * m}–{8 * m + 7}:\nrow\naddresses", alpha=0.35, fontsize=6)
        for lane in range(32):
            for i in range(2):
                r, c = fragments.ldmatrix(lane, i)
                _box(ax, c0 + c, r0 + r, 1, 1, REGISTER_COLORS[m], str(lane),
                     alpha=0.55, fontsize=6)
    ax.text(8, 17.2, "matrix m lands in register m of every lane: the A operand of "
            "m16n8k16 in one instruction", ha="center", fontsize=8)
    _frame(ax, 16, 17.5, "ldmatrix.sync.aligned.m8n8.x4: a 16 × 16 tile of 16-bit "
           "elements, the lane receiving each", top=-1.2)
    ax.set_xlim(-3.5, 19.5)
    return ax


def bank_groups(offsets, swizzled, ax=None):
    """Where the first eight 16-byte chunks of rows 0–7 of a tile of 16-bit elements
    land among the 8 bank groups of a 128-byte line (banks 4g..4g+3), given the element
    offsets of chunk starts ``offsets[row][chunk]``, unswizzled and ``swizzled``
    (rows of 64 or more elements). Chunk 0 of each row, the column one ldmatrix reads,
    is coloured."""
    axes = ax if ax is not None else plt.subplots(1, 2, figsize=(10, 4.4))[1]
    for a, offs, title in ((axes[0], offsets, "row-major"),
                           (axes[1], swizzled, "swizzled: chunk c ^ (row % 8)")):
        hits = [0] * 8
        for r in range(8):
            for c, off in enumerate(offs[r][:8]):
                group = 2 * off % 128 // 16
                _box(a, group, r, 1, 1, ORANGE if c == 0 else GREY, f"c{c}",
                     alpha=0.8 if c == 0 else 0.35, fontsize=9)
                hits[group] += c == 0
        ways = max(hits)
        a.text(4, 8.7, f"chunk 0 of rows 0–7: {ways}-way bank conflict" if ways > 1
               else "chunk 0 of rows 0–7: 8 different bank groups, no conflict",
               ha="center", fontsize=8)
        _frame(a, 8, 9.2, f"{title} (x: bank group of 4 banks)")
        for r in range(8):   # the rows, beside the tile: cell c<k> is chunk k of row r
            a.text(-0.2, r + 0.5, f"row {r}", ha="right", va="center", fontsize=8)
        a.set_xlim(-1.6, 8.5)
    return axes


def backward_schedule(tiles_q=4, tiles_k=5, ax=None):
    """Chapter 11's two passes over the (query tile, key tile) grid, causal: the dK/dV
    pass gives each key tile a block that walks down its column, the dQ pass gives each
    query tile a block that walks along its row. Tiles above the diagonal are
    skipped."""
    axes = ax if ax is not None else plt.subplots(1, 2, figsize=(10, 4))[1]
    colors = [BLUE, GREEN, ORANGE, "#8172b3", "#c44e52"]
    titles = ("$dK, dV$: a block per key tile $j$, down its column;\n"
              "$dK_j, dV_j$ in registers, $Q_i, dO_i, L_i, \\Delta_i$ streamed",
              "$dQ$: a block per query tile $i$, along its row;\n"
              "$dQ_i$ in registers, $K_j, V_j$ streamed")
    for a, by_key, title in ((axes[0], True, titles[0]), (axes[1], False, titles[1])):
        for i in range(tiles_q):
            for j in range(tiles_k):
                skipped = j > i + (tiles_k - tiles_q)          # causal, bottom-right
                owner = j if by_key else i
                _box(a, j, i, 1, 1, GREY if skipped else colors[owner % len(colors)],
                     "" if skipped else f"{i},{j}", alpha=0.25 if skipped else 0.55)
        for n in range(tiles_k if by_key else tiles_q):   # along the tiles' edges
            start, end = ((n + 0.15, -0.3), (n + 0.15, tiles_q + 0.3)) if by_key else \
                ((-0.3, n + 0.15), (tiles_k + 0.3, n + 0.15))
            a.annotate("", xy=end, xytext=start,
                       arrowprops=dict(arrowstyle="->", color="black", alpha=0.5))
        a.text(tiles_k / 2, tiles_q + 0.9, f"rows: {tiles_q} query tiles $i$, columns: "
               f"{tiles_k} key tiles $j$\n($S_k > S_q$, causal, bottom-right); grey: "
               "skipped", ha="center", va="top", fontsize=8)
        _frame(a, tiles_k, tiles_q + 1.6, title, top=-0.8)
    return axes


def wgmma_accumulators(n=16, ax=None):
    """Which of a warpgroup's 128 threads holds each element of wgmma's m64nNk16
    accumulator D (64 x N): warp 0's 16 rows cell by cell (each 8 columns as
    mma.sync's C fragment), warps 1-3 the same 32w threads on."""
    ax = ax or plt.subplots(figsize=((n + 9) / 2.8, 26 / 2.8))[1]
    for thread in range(32):
        for i in range(n // 2):
            r, c = fragments.d_m64nN(thread, i)
            _box(ax, c, r, 1, 1, REGISTER_COLORS[0], str(thread), alpha=0.3 + 0.15 * (
                i % 2), fontsize=6.5)
    ax.text(n + 0.4, 8, "warp 0\nrows 0–15", fontsize=8, va="center")
    for w in range(1, 4):
        _box(ax, 0, 16 + 3 * (w - 1), n, 3, REGISTER_COLORS[w],
             f"warp {w}: rows {16 * w}–{16 * w + 15}, threads {32 * w}–{32 * w + 31} "
             f"in the same places", alpha=0.35, fontsize=8)
    _frame(ax, n + 5, 25, f"wgmma m64n{n}k16: the thread holding each accumulator "
           "(shade: a thread's even / odd register)", top=-1)
    return ax


def hopper_pipeline(tiles=4, ax=None):
    """A schematic timeline of chapter 12's steps 1 and 2 for one block: in step 1 the
    warpgroup itself issues every cp.async of the next key tile, then waits for its
    copies and a block barrier; in step 2 one thread issues the tile's TMA boxes and
    the warpgroup waits on the buffer's mbarrier phase (parity)."""
    ax = ax or plt.subplots(figsize=(10, 3.6))[1]
    issue, work = 0.6, 3.0   # time units: issuing one tile's copies, one tile's math
    rows = {"step 1: 128 threads\n(cp: copy, wait, barrier)": 4.2,
            "step 2: thread 0 (TMA)": 2.1, "step 2: warpgroup": 1.0}
    for label, y in rows.items():
        ax.text(-0.3, y + 0.4, label, ha="right", va="center", fontsize=8)
    for j in range(tiles):
        t1 = j * (issue + work)   # step 1: copies issued by every thread, then math
        if j + 1 < tiles:
            _box(ax, t1, 4.2, issue, 0.8, ORANGE, "cp", alpha=0.6, fontsize=8)
        _box(ax, t1 + issue * (j + 1 < tiles), 4.2, work, 0.8, BLUE,
             f"tile {j}", alpha=0.5, fontsize=8)
        t2 = j * work             # step 2: the math runs back to back
        if j + 1 < tiles:
            _box(ax, t2, 2.1, 0.25, 0.8, ORANGE, alpha=0.8)
            ax.annotate("", xy=(t2 + work, 1.9), xytext=(t2 + 0.25, 2.5),
                        arrowprops=dict(arrowstyle="->", color=GREY))
            ax.text(t2 + 0.35, 2.5, f"K, V {j + 1} → buffer {(j + 1) % 2}",
                    fontsize=8, va="center")
        _box(ax, t2, 1.0, work, 0.8, BLUE,
             f"tile {j}: wait\nbar[{1 + j % 2}], parity {j // 2 % 2}", alpha=0.5,
             fontsize=8)
    end = tiles * (issue + work)
    return _timeline(ax, (-5, end + 0.5), (-0.2, 5.6),
                     "who copies and who waits: cp.async from every thread (step 1), "
                     "TMA on mbarriers (step 2; Q's box first, on bar[0])")


def warp_specialized(tiles=5, ax=None):
    """A schematic timeline of chapter 12's step 3 for one block: the producer thread
    fills a ring of two K/V buffers by TMA, refilling buffer s only once both consumer
    warpgroups have arrived on empty[s]; each consumer waits for full[s]'s phase, then
    computes the tile for its 64 query rows."""
    ax = ax or plt.subplots(figsize=(10, 4.2))[1]
    work, fill = 3.0, 0.45   # time units: one tile's math, issuing one tile's boxes
    rows = {"producer: thread 0\n(TMA)": 3.2, "consumer 0\n(rows 0-63)": 2.0,
            "consumer 1\n(rows 64-127)": 0.8}
    for label, y in rows.items():
        ax.text(-0.3, y + 0.4, label, ha="right", va="center", fontsize=9)
    for i in range(tiles):
        s, start = i % 2, 2 * fill + i * work   # tile i's math, once it has landed
        # fills 0 and 1 at once; fill i >= 2 after both consumers release tile i - 2
        at = i * fill if i < 2 else start - work + 0.05
        _box(ax, at, 3.2, fill, 0.8, ORANGE, alpha=0.8)
        if i != 1:   # the labels of alternate fills on two heights: no overlap
            ax.text(at, 4.15 + 0.75 * (i % 2), "K, V 0 → buffer 0\nK, V 1 → buffer 1"
                    if i == 0 else f"K, V {i} → buffer {s}, after\n"
                    f"empty[{s}] parity {i // 2 - 1}", ha="left", fontsize=8)
        if i >= 2:
            ax.annotate("", xy=(at, 3.6), xytext=(at - 0.05, 2.8),
                        arrowprops=dict(arrowstyle="->", color="black", lw=0.6))
        for y in (2.0, 0.8):
            _box(ax, start, y, work - 0.1, 0.8, BLUE,
                 f"tile {i}: wait full[{s}]\nparity {i // 2 % 2}", alpha=0.5,
                 fontsize=8)
    return _timeline(ax, (-4.5, 2 * fill + tiles * work + 0.5), (0.5, 5.6),
                     "warp specialization: the producer refills a buffer once both "
                     "consumers have released it (step 3)")


def ping_pong(tiles=2, ax=None):
    """A schematic timeline of chapter 12's step 4 for one block: the two consumers
    issue their wgmma chains in turns, so the tensor cores run QKᵀ and PV of one while
    the other computes its softmax (a softmax as long as a chain: no idle time)."""
    ax = ax or plt.subplots(figsize=(10, 2.8))[1]
    g = 1.0   # one chain, and one softmax: the same length here
    rows = {"tensor cores": 2.2, "consumer 0": 1.1, "consumer 1": 0.0}
    for label, y in rows.items():
        ax.text(-0.2, y + 0.4, label, ha="right", va="center", fontsize=8)
    for j in range(tiles):
        for c in (0, 1):
            qk, pv = (4 * j + c) * g, (4 * j + c + 2) * g   # their turns
            for start, what in ((qk, "QKᵀ"), (pv, "PV")):
                _box(ax, start, 2.2, g, 0.8, BLUE, f"{c}: {what} {j}", alpha=0.6,
                     fontsize=7)
            y = rows[f"consumer {c}"]
            _box(ax, qk + g, y, g, 0.8, ORANGE, f"softmax {j}", alpha=0.7, fontsize=7)
    end = 4 * tiles * g + g
    return _timeline(ax, (-2.2, end + 0.2), (-0.2, 3.2),
                     "ping-pong: each consumer's softmax runs while the other's "
                     "matrix products do (step 4)")
