"""The book's interactive figures. Each has a static twin (same drawing code) that
renders in the HTML book, where no Python kernel runs behind the page."""
from __future__ import annotations

import math

import matplotlib.patches as patches
import matplotlib.pyplot as plt
import torch

from ..reference import masks
from . import plots

__all__ = ["online_softmax_states", "draw_online_step", "online_softmax_figure",
           "online_softmax_stepper", "mask_explorer", "mask_explorer_figure",
           "draw_flash_step", "flash_figure", "flash_stepper"]


def online_softmax_states(x):
    """The running (m, l) after each element of the row ``x``: m is the max so far and
    l = Σ exp(x_i − m) over the elements so far. Starts from the empty state
    (−inf, 0)."""
    states = [(-math.inf, 0.0)]
    for xi in map(float, x):
        m, l = states[-1]
        m_new = max(m, xi)
        states.append((m_new, l * math.exp(m - m_new) + math.exp(xi - m_new)
                       if m_new > -math.inf else 0.0))
    return states


def draw_online_step(ax, x, k):
    """The row after k elements of the online pass: seen elements as bars of
    exp(x_i − m_k)/l_k (what their probabilities would be if the row ended here), unseen
    ones grey."""
    x = [float(v) for v in x]
    states = online_softmax_states(x)
    (m, l), (final_m, final_l) = states[k], states[-1]
    seen = [math.exp(v - m) / l if i < k else 0.0 for i, v in enumerate(x)]
    exact = [math.exp(v - final_m) / final_l for v in x]
    ax.bar(range(len(x)), exact, color="0.85", label="final softmax")
    ax.bar(range(k), seen[:k], color="tab:blue", label="after k elements")
    ax.set_ylim(0, 1.05)
    ax.set_xticks(range(len(x)))
    ax.set_xlabel("element i")
    ax.set_title(f"k = {k}:  m = {m:.2f},  l = {l:.3f}" if k
                 else "k = 0:  m = −∞,  l = 0", fontsize=10)


def online_softmax_figure(x, steps):
    """Static panels of the online pass over ``x`` after each number of elements in
    ``steps``."""
    fig, axes = plots.panel_grid(len(steps), 2, 4, 2.8, sharey=True)
    for ax, k in zip(axes, steps):
        draw_online_step(ax, x, k)
    for ax in axes[::2]:
        ax.set_ylabel("exp(x_i − m) / l")
    axes[-1].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def online_softmax_stepper(x, start=None):
    """A slider over k = 0 … len(x) that redraws :func:`draw_online_step`. It opens at
    ``start`` (default: half the row, so that seen and unseen elements both show)."""
    import ipywidgets as widgets
    out = widgets.Output()

    def show(k):
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(6, 3))
            draw_online_step(ax, x, k)
            ax.legend(fontsize=8, loc="upper right")
            plt.show()

    start = len(x) // 2 if start is None else start
    slider = widgets.IntSlider(value=start, min=0, max=len(x), description="elements k")
    slider.observe(lambda change: show(change["new"]), names="value")
    show(start)
    return widgets.VBox([slider, out])


def mask_explorer_figure(configs):
    """Static panels of :func:`attnbook.masks.allowed` for each (title, Sq, Sk,
    rules): the explorer's settings where widgets do not run (the rendered book)."""
    return plots.mask_panels(configs)


def mask_explorer(sq=16, sk=16):
    """Pick a mask kind, stride, window, Sq and Sk; see which keys each query
    attends."""
    import ipywidgets as widgets
    out = widgets.Output()
    kind = widgets.Dropdown(options=["none", "causal", "strided", "strided + causal",
                                     "window", "window + causal", "key padding"],
                            value="causal", description="mask")
    stride = widgets.IntSlider(value=3, min=1, max=8, description="stride")
    window = widgets.IntSlider(value=4, min=1, max=16, description="window")
    n_q = widgets.IntSlider(value=sq, min=1, max=48, description="Sq")
    n_k = widgets.IntSlider(value=sk, min=1, max=48, description="Sk")

    def show(*_):
        rules = dict(is_causal="causal" in kind.value)
        if "strided" in kind.value:
            rules["stride"] = stride.value
        if "window" in kind.value:
            rules["window"] = window.value
        if kind.value == "key padding":
            rules["key_lengths"] = torch.tensor([max(1, n_k.value * 2 // 3)])
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(5, 5))
            allowed = masks.allowed(n_q.value, n_k.value, **rules)[0, 0]
            plots.draw_mask(ax, allowed, f"{kind.value}: {int(allowed.sum())} of "
                                         f"{allowed.numel()} scores")
            plt.show()

    for w in (kind, stride, window, n_q, n_k):
        w.observe(show, names="value")
    show()
    return widgets.HBox([widgets.VBox([kind, stride, window, n_q, n_k]), out])


# What the tile panel's colours mean
FLASH_KEY = [patches.Patch(facecolor="tab:orange", edgecolor="k",
                           label="this step's tile"),
             patches.Patch(facecolor="tab:blue", alpha=0.35, label="computed"),
             patches.Patch(facecolor="0.9", hatch="//", edgecolor="0.5",
                           label="masked, skipped"),
             patches.Patch(facecolor="white", edgecolor="0.5", label="not yet")]


def draw_flash_step(axes, trace, step, sq, sk, final_o, causal=False):
    """Three panels after step ``step`` of a
    :func:`attnbook.flash_tiles.flash_attention_tiles` trace: the score tiles visited so
    far (the current one outlined, masked-out ones hatched; with ``causal``, the last
    admitted key of each query, the diagonal aligned bottom-right), the running m and l
    of the current query tile's rows, and how far each row's normalised partial output
    still is from the final one."""
    grid, state, error = axes
    now = trace[step]
    for t in trace[:step + 1]:
        (r0, r1), (c0, c1) = t["rows"], t["cols"]
        current = t is now
        grid.add_patch(patches.Rectangle((c0, r0), c1 - c0, r1 - r0,
                                         hatch="//" if t["skipped"] else None,
                                         facecolor="0.9" if t["skipped"]
                                         else ("tab:orange" if current else "tab:blue"),
                                         alpha=1.0 if current or t["skipped"] else 0.35,
                                         edgecolor="k" if current else "0.5",
                                         lw=2 if current else 0.5))
    if causal:   # key j is admitted for query i while j <= i + sk - sq
        grid.plot([sk - sq, sk], [0, sq], color="k", lw=1, ls="--")
    grid.set(xlim=(0, sk), ylim=(sq, 0), xlabel="key j", ylabel="query i",
             aspect="equal",
             title=f"tile ({now['q_tile']}, {now['k_tile']})"
                   + (": masked, skipped" if now["skipped"] else ""))
    rows = range(*now["rows"])
    state.plot(rows, now["m"].tolist(), "o", label="m (running max)")
    state.plot(rows, now["l"].tolist(), "s", label="ℓ (running sum)")
    state.set(xlabel="query i", ylabel="m and ℓ", title="state of the tile's rows")
    state.legend(fontsize=7, loc="upper left", framealpha=0.6)
    gap = (now["partial"] - final_o[now["rows"][0]:now["rows"][1]]).abs().amax(-1)
    error.bar(rows, gap.tolist(), color="tab:red")
    top = max(1e-9, float(final_o.abs().max()) * 1.1)
    error.set(xlabel="query i", ylim=(0, top), title="max |partial O − final O|")
    if float(gap.max()) == 0.0:
        error.text(sum(now["rows"]) / 2 - 0.5, top / 2, "every row final",
                   ha="center", color="0.4")


def flash_figure(trace, steps, sq, sk, final_o, causal=False):
    """Static rows of :func:`draw_flash_step`, one per step in ``steps``, under a key
    to the tiles' colours."""
    fig, axes = plt.subplots(len(steps), 3, figsize=(10, 2.9 * len(steps) + 0.4))
    for row, step in zip(axes, steps):
        draw_flash_step(row, trace, step, sq, sk, final_o, causal)
    fig.legend(handles=FLASH_KEY, loc="upper center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    return fig


def flash_stepper(trace, sq, sk, final_o, causal=False):
    """A slider over the steps of a trace that redraws :func:`draw_flash_step`."""
    import ipywidgets as widgets
    out = widgets.Output()

    def show(step):
        with out:
            out.clear_output(wait=True)
            fig, axes = plt.subplots(1, 3, figsize=(12, 3.9))
            draw_flash_step(axes, trace, step, sq, sk, final_o, causal)
            fig.legend(handles=FLASH_KEY, loc="upper center", ncol=4, fontsize=8)
            fig.tight_layout(rect=(0, 0, 1, 0.9))
            plt.show()

    slider = widgets.IntSlider(value=0, min=0, max=len(trace) - 1, description="step")
    slider.observe(lambda change: show(change["new"]), names="value")
    show(0)
    return widgets.VBox([slider, out])
