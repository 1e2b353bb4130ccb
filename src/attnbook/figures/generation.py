"""Chapter 10's figures: the two phases of generation on a timeline, what the KV cache
costs per token, and the recorded time to first token and between tokens of each
implementation."""
from __future__ import annotations

import matplotlib.pyplot as plt

__all__ = ["MODELS", "kv_bytes_per_token", "plot_kv_per_token", "plot_timeline",
           "plot_ttft_tbt"]

# (layers, kv heads, head_dim) from the models' published configurations.
MODELS = {
    "GPT-2 small": (12, 12, 64),
    "Llama-2 7B": (32, 32, 128),
    "Mistral 7B (8 kv heads)": (32, 8, 128),
}


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int,
                       itemsize: int = 2) -> int:
    """A key and a value vector per kv head per layer."""
    return 2 * layers * kv_heads * head_dim * itemsize


def plot_kv_per_token(models=MODELS, context=4096, ax=None):
    """KiB of float16 KV cache per token, and MiB for one sequence of ``context``
    tokens."""
    ax = ax or plt.subplots(figsize=(7, 2.6))[1]
    names = list(models)
    kib = [kv_bytes_per_token(*models[n]) / 1024 for n in names]
    bars = ax.barh(names, kib, color="tab:blue")
    for bar, k in zip(bars, kib):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {k:.0f} KiB/token, {k * context / 1024:.0f} MiB at {context} tokens",
                va="center", fontsize=9)
    ax.set_xlim(0, max(kib) * 2.2)
    ax.invert_yaxis()
    ax.set_xlabel("KV cache per token, float16 (KiB)")
    return ax


def plot_timeline(prefill_ms: float, decode_ms: list, ax=None, label=""):
    """One request on a time axis: the prefill, then one bar per decode step, as
    measured; TTFT and the mean TBT written on it."""
    ax = ax or plt.subplots(figsize=(9, 1.8))[1]
    ax.broken_barh([(0, prefill_ms)], (0, 1), color="tab:orange")
    t, steps = prefill_ms, []
    for ms in decode_ms:
        steps.append((t, ms))
        t += ms
    ax.broken_barh(steps, (0, 1), facecolors=["tab:blue", "tab:cyan"] * len(steps),
                   edgecolor="white", linewidth=0.5)
    tbt = sum(decode_ms) / max(1, len(decode_ms))
    ax.text(0, 1.15, f"prefill: TTFT {prefill_ms:.3g} ms", ha="left", fontsize=9)
    ax.text(prefill_ms + (t - prefill_ms) / 2, 1.15,
            f"{len(decode_ms)} decode steps: TBT {tbt:.3g} ms", ha="center",
            fontsize=9)
    ax.set_ylim(0, 1.6)
    ax.set_yticks([])
    ax.set_xlim(0, t * 1.02)
    ax.set_xlabel("time (ms)" + (f" — {label}" if label else ""))
    return ax


# Each implementation's colour and its name in the legend: the book's kernels in blues,
# PyTorch's in warm tones.
_STYLES = {"attnbook": ("tab:blue", "the book's kernels"),
           "attnbook contiguous": ("tab:blue", "the book's kernels"),
           "attnbook paged": ("lightskyblue", "the book's kernels, paged cache"),
           "sdpa": ("tab:orange", "SDPA"), "sdpa contiguous": ("tab:orange", "SDPA"),
           "eager": ("tab:gray", "eager"), "eager contiguous": ("tab:gray", "eager")}


def plot_ttft_tbt(result, models=("HF GPT-2", "Decoder")):
    """Time to first token (log scale) and time between tokens (two panels) of every
    implementation of chapter 10's benchmark ``result``, a group of bars per model and
    batch, each bar marked with its time over SDPA's in its group. None when the
    result holds no generation rows (a quick set)."""
    rows = [r for r in result.rows if r.get("model") in models and r.get("ttft_ms")]
    if not rows:
        return None
    groups = sorted({(r["model"], r["B"]) for r in rows},
                    key=lambda g: (models.index(g[0]), g[1]))
    fig, axes = plt.subplots(2, 1, figsize=(9, 6.4))   # full width: room for the labels
    legend = {}
    for ax, metric, title in zip(axes, ("ttft_ms", "tbt_ms"),
                                 ("time to first token", "time between tokens")):
        for x, group in enumerate(groups):
            mine = [r for r in rows if (r["model"], r["B"]) == group]
            base = next(r[metric] for r in mine if r["impl"].startswith("sdpa"))
            width = 0.8 / len(mine)
            for i, r in enumerate(mine):
                colour, name = _STYLES.get(r["impl"], ("tab:green", r["impl"]))
                bar = ax.bar(x + (i - (len(mine) - 1) / 2) * width, r[metric], width,
                             color=colour)[0]
                legend.setdefault(name, bar)
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(),
                        f"{r[metric] / base:.2f}×", ha="center", va="bottom",
                        fontsize=8)
        ax.set_xticks(range(len(groups)),
                      [f"{model}\nB = {b}" for model, b in groups], fontsize=9)
        ax.set_ylabel(f"{title} (ms)")
    axes[0].set_yscale("log")
    axes[0].yaxis.set_major_formatter(lambda y, _: f"{y:g}")
    axes[0].yaxis.set_minor_formatter(lambda y, _: f"{y:g}"
                                      if str(round(y))[0] in "25" else "")
    for ax in axes:
        ax.margins(y=0.12)   # room for the labels above the tallest bars
    fig.legend(legend.values(), legend.keys(), loc="upper center", ncol=len(legend),
               bbox_to_anchor=(0.5, 0.95), fontsize=9, frameon=False)
    fig.suptitle(f"{result.machine.get('gpu', '')}: each bar marked with its time over "
                 "SDPA's", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig
