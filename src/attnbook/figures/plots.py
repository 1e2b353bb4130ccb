"""The book's standard figures."""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Patch

from ..reference import masks

__all__ = ["draw_mask", "panel_grid", "mask_panels", "mask_gallery", "draw_series",
           "plot_metric", "plot_times", "plot_pct_peak", "plot_memory", "plot_speedups",
           "plot_sweep", "plot_losses", "plot_sass_calibration"]

# (title, Sq, Sk, rules) of each panel of the gallery of mask kinds.
GALLERY = [
    ("causal", 12, 12, dict(is_causal=True)),
    ("causal, Sq < Sk\n(bottom-right)", 4, 12, dict(is_causal=True)),
    ("key padding\n(length 9)", 12, 12, dict(key_lengths=torch.tensor([9]))),
    ("strided (stride 3)", 12, 12, dict(stride=3)),
    ("strided + causal", 12, 12, dict(stride=3, is_causal=True)),
    ("sliding window (4)\n+ causal", 12, 12, dict(window=4, is_causal=True)),
]


def draw_mask(ax, allowed: torch.Tensor, title: str = "") -> None:
    """Draw a [Sq, Sk] boolean mask: filled cells are the keys a query attends."""
    ax.imshow(allowed.cpu().numpy(), cmap="Blues", vmin=0, vmax=1.3, aspect="equal")
    sq, sk = allowed.shape
    ax.set_xticks(range(-0, sk, max(1, sk // 4)))
    ax.set_yticks(range(0, sq, max(1, sq // 4)))
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title, fontsize=10)


def panel_grid(n: int, columns: int, width: float, height: float, **subplots):
    """A figure of ``n`` panels of ``width`` × ``height`` inches, ``columns`` to a
    row (the book's page is about 8 inches wide: more panels in a row shrink their
    text below legibility), and the list of its ``n`` axes; cells past ``n`` stay
    blank."""
    rows = -(-n // columns)
    columns = min(columns, n)
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows),
                             squeeze=False, **subplots)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, list(axes.flat[:n])


def mask_panels(configs, columns: int = 3):
    """A figure of masks, ``columns`` to a row (legible at the book's page width): one
    panel per (title, Sq, Sk, rules of :func:`attnbook.masks.allowed`)."""
    fig, axes = panel_grid(len(configs), columns, 3, 3.6)
    for ax, (title, sq, sk, rules) in zip(axes, configs):
        draw_mask(ax, masks.allowed(sq, sk, **rules)[0, 0], title)
    cmap = plt.get_cmap("Blues")
    fig.legend(handles=[Patch(facecolor=cmap(1 / 1.3), label="attends"),
                        Patch(facecolor=cmap(0.0), edgecolor="grey", label="masked")],
               loc="upper center", ncol=2, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def mask_gallery():
    """One figure with every kind of mask the book builds kernels for."""
    return mask_panels(GALLERY)


# --- benchmark figures (rows as written by attnbook.bench) ----------------------------

def _series(result, metric, x):
    """{impl: ([x...], [metric...])} over the rows that ran."""
    out = {}
    for r in result.rows:
        if r.get("ms") is not None and r.get(metric) is not None:
            xs, ys = out.setdefault(r["impl"], ([], []))
            xs.append(r[x])
            ys.append(r[metric])
    return out


MARKERS, LINES = "os^Dv<>P", ("-", "--", ":", "-.")


def draw_series(ax, series: dict) -> None:
    """One line per name of ``series`` ({name: (xs, ys)}), each with its own marker and
    line style, later markers hollow, so that a line drawn over another leaves it
    visible; series equal at every point are one line named "a = b"."""
    merged = {}   # points -> names
    for name, (xs, ys) in series.items():
        merged.setdefault(tuple(sorted(zip(xs, ys))), []).append(name)
    for n, (points, names) in enumerate(merged.items()):
        ax.plot([x for x, _ in points], [y for _, y in points],
                label=" = ".join(sorted(names)),
                marker=MARKERS[n % len(MARKERS)], linestyle=LINES[n % len(LINES)],
                markersize=max(3.5, 7 - n * 0.5),
                markerfacecolor=None if n == 0 else "none")


def plot_metric(result, metric, x="S", ax=None, logy=True, ylabel=None):
    """One line per implementation: ``metric`` (a row key such as ms, tflops, gbs,
    pct_peak, peak_mem_bytes) against the case parameter ``x``."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    draw_series(ax, _series(result, metric, x))
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel or metric)
    ax.set_title(result.machine.get("gpu", ""), fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))   # off the lines
    ax.grid(alpha=0.3)
    return ax


def plot_times(result, x="S", ax=None):
    return plot_metric(result, "ms", x, ax, ylabel="time (ms, median)")


def plot_pct_peak(result, x="S", ax=None):
    return plot_metric(result, "pct_peak", x, ax, logy=False,
                       ylabel="% of the device's peak")


def plot_memory(result, x="S", ax=None):
    return plot_metric(result, "peak_mem_bytes", x, ax,
                       ylabel="peak memory above inputs (bytes)")


def plot_speedups(result, baseline, x="S", ax=None):
    """Grouped bars: how many times faster than ``baseline`` each implementation runs,
    per case."""
    times = _series(result, "ms", x)
    if baseline not in times:
        raise ValueError(f"no timings of the baseline {baseline!r}")
    base = dict(zip(*times[baseline]))
    cases = sorted(base)
    impls = [i for i in times if i != baseline]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(impls))
    for n, impl in enumerate(impls):
        mine = dict(zip(*times[impl]))
        ax.bar([c + n * width for c in range(len(cases))],
               [base[c] / mine[c] if c in mine else 0 for c in cases], width,
               label=impl)
    ax.set_xticks([c + width * (len(impls) - 1) / 2 for c in range(len(cases))],
                  [str(c) for c in cases])
    ax.axhline(1, color="k", lw=0.8)
    ax.set_xlabel(x)
    ax.set_ylabel(f"speedup over {baseline}")
    ax.set_title(result.machine.get("gpu", ""), fontsize=10)
    ax.legend(fontsize=8)
    return ax


def plot_sweep(result, ax=None, what="", **where):
    """Heatmap of the median time of each (Br, Bc) in rows that have them
    (chapter 7's sweep), with its colour bar; ``what`` (the kernel swept) and the
    rows' S and mask head the title."""
    rows = [r for r in result.select(**where) if "Br" in r and r.get("ms") is not None]
    brs, bcs = sorted({r["Br"] for r in rows}), sorted({r["Bc"] for r in rows})
    grid = [[float("nan")] * len(bcs) for _ in brs]
    for r in rows:
        grid[brs.index(r["Br"])][bcs.index(r["Bc"])] = r["ms"]
    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 4))
    image = ax.imshow(grid, cmap="viridis_r")
    ax.figure.colorbar(image, ax=ax, label="median time (ms)")
    for i, line in enumerate(grid):
        for j, ms in enumerate(line):
            if ms == ms:   # dark text where the cell is light (by its luminance)
                r, g, b = image.cmap(image.norm(ms))[:3]
                light = 0.299 * r + 0.587 * g + 0.114 * b > 0.5
                ax.text(j, i, f"{ms:.2f}", ha="center", va="center", fontsize=9,
                        color="black" if light else "white")
    ax.set_xticks(range(len(bcs)), [str(b) for b in bcs])
    ax.set_yticks(range(len(brs)), [str(b) for b in brs])
    ax.set_xlabel("Bc (keys per tile)")
    ax.set_ylabel("Br (query rows per block)")
    sizes = sorted({r["S"] for r in rows if "S" in r})
    causal = {r.get("causal") for r in rows} == {True}
    case = ", ".join(filter(None, [what, f"S = {sizes[0]}" if len(sizes) == 1 else "",
                                   "causal" if causal else ""]))
    ax.set_title(f"{case}\n{result.machine.get('gpu', '')}", fontsize=10)
    return ax


def plot_losses(curves: dict, ax=None):
    """Training loss per step of each run of ``curves`` ({label: [loss, ...]}), drawn so
    that curves that coincide stay visible (dashed over solid)."""
    ax = ax or plt.subplots(figsize=(7, 3.5))[1]
    for n, (label, losses) in enumerate(curves.items()):
        ax.plot(range(1, len(losses) + 1), losses, label=label,
                linestyle="-" if n == 0 else "--", linewidth=2.5 if n == 0 else 1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.legend()
    return ax


def plot_sass_calibration(anchors: dict, marks: dict, arch: str = "sm_80", ax=None):
    """Each kernel of ``anchors`` (a record of :func:`attnbook.bench.load_sass_anchors`)
    at its other instructions per HMMA in the hot loop (``arch``'s SASS) against its
    published fraction of FlashAttention-2's speed, numbered; ``marks`` (label ->
    other instructions per HMMA) as vertical lines."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6))
    rows = [k for k in anchors["kernels"] if k["arch"] == arch]
    x = [k["other_per_hmma"] for k in rows]
    y = [100 * k["published_fraction_of_fa2"] for k in rows]
    ax.scatter(x, y, s=18, color="C0", zorder=3,
               label=f"{anchors['source']['repository']} ({anchors['source']['gpu']})")
    groups = []   # kernels within 0.15 instructions and 3 points: one label, "9–16"
    number = lambda t: int(t[0]["name"].split()[-1])   # "kernel 12" -> 12
    for k, xi, yi in sorted(zip(rows, x, y), key=number):
        near = next((g for g in groups if abs(g[1] - xi) < 0.15 and abs(g[2] - yi) < 3),
                    None)
        if near:
            near[0].append(k["name"].split()[-1])
        else:
            groups.append([[k["name"].split()[-1]], xi, yi])
    for names, xi, yi in groups:
        ax.annotate(names[0] if len(names) == 1 else f"{names[0]}–{names[-1]}",
                    (xi, yi), textcoords="offset points", xytext=(4, -3), fontsize=8)
    for i, (label, value) in enumerate(marks.items()):
        ax.axvline(value, color=f"C{i + 1}", linestyle="--", label=label)
    ax.set_xlim(min(x + list(marks.values())) - 0.2, max(x) + 0.2)
    ax.set_xlabel(f"other instructions per HMMA in the hot loop ({arch})")
    ax.set_ylabel("% of FlashAttention-2 (published)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
    ax.grid(alpha=0.3)
    return ax
