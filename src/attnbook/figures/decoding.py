"""Chapter 9's figures: the roofline of a decode step, the partial states of split-K and
their merge, the memory a KV cache reserves (contiguous against paged, over a simulated
mix of requests), and the recorded decode bandwidth."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch

from ..bench.harness import PEAKS
from .plots import draw_series, panel_grid

__all__ = ["decode_intensity", "plot_roofline", "split_states", "plot_split_states",
           "RequestMix", "simulate_kv_memory", "plot_kv_memory",
           "plot_decode_bandwidth"]


def decode_intensity(H, Hkv, Sq=1, itemsize=2) -> float:
    """FLOPs per byte of one decode step's attention: 4·H·Sq·L·D FLOPs over the
    2·Hkv·L·D·itemsize bytes of the cache it reads (q and o are negligible): independent
    of the length L, the head dimension D and the batch B."""
    return 4 * H * Sq / (2 * Hkv * itemsize)


def _peaks(gpu):
    return next(p for name, p in PEAKS if name == gpu)


def plot_roofline(gpus=("T4", "A100"), batches=(1, 8, 64, 256), d_model=4096, ax=None):
    """The fp16 roofline of each GPU, with one point per batch size for a decode step's
    attention (multi-head, and grouped with 4 query heads per kv head) and for a
    d_model × d_model weight matrix applied to the B new tokens (2·B·d² FLOPs over the
    d² fp16 weights: intensity ≈ B)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    xs = [2.0 ** (e / 8) for e in range(-16, 97)]
    for gpu, style in zip(gpus, ("-", "--", ":")):
        p = _peaks(gpu)
        ridge = p["fp16_tflops"] * 1e12 / (p["bandwidth_gbs"] * 1e9)
        ax.plot(xs, [min(p["fp16_tflops"], x * p["bandwidth_gbs"] / 1e3) for x in xs],
                "k" + style, lw=1,
                label=f"{gpu} roofline (ridge at {ridge:.0f} FLOP/B)")
    p = _peaks(gpus[-1])
    bw = p["bandwidth_gbs"] / 1e3   # TB/s: TFLOP/s per FLOP/byte

    def attainable(i):
        return min(p["fp16_tflops"], i * bw)

    for g, color in ((1, "tab:red"), (4, "tab:orange")):
        i = decode_intensity(g, 1)
        ax.plot(i, attainable(i), "s", color=color, ms=9,
                label=f"attention, G = {g}: every B")
    for n, b in enumerate(batches):
        gemm = 2 * b * d_model**2 / (2 * d_model**2 + 2 * 2 * b * d_model)
        ax.plot(gemm, attainable(gemm), "o", color="tab:blue", ms=4 + 2 * n,
                label="weights × B tokens" if n == 0 else None)
        ax.annotate(f"B={b}", (gemm, attainable(gemm)), textcoords="offset points",
                    xytext=(6, -10), fontsize=8, color="tab:blue")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of memory traffic)")
    ax.set_ylabel("attainable TFLOP/s (fp16)")
    ax.set_title(f"One decode step on the roofline (points on the {gpus[-1]}'s)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    return ax


def split_states(scores: torch.Tensor, values: torch.Tensor, num_splits: int):
    """What split-K computes for one query row, in float64: the keys cut into
    ``num_splits`` chunks; for each, the softmax weights normalized within the chunk,
    its output o_s and its log-sum-exp lse_s; then the merge, lse = log Σ exp(lse_s),
    o = Σ exp(lse_s − lse) o_s. Returns (chunks, weights, outputs, lses, lse, o)."""
    scores, values = scores.double(), values.double()
    chunks = list(torch.arange(len(scores)).chunk(num_splits))
    weights = [torch.softmax(scores[c], 0) for c in chunks]
    outputs = [w @ values[c] for w, c in zip(weights, chunks)]
    lses = torch.stack([torch.logsumexp(scores[c], 0) for c in chunks])
    lse = torch.logsumexp(lses, 0)
    o = sum(torch.exp(ls - lse) * out for ls, out in zip(lses, outputs))
    return chunks, weights, outputs, lses, lse, o


def plot_split_states(scores: torch.Tensor, values: torch.Tensor, num_splits: int):
    """Left: each split's weights, normalized over its own keys, with its lse_s. Right:
    the same weights times exp(lse_s − lse), the merge's factor, against the softmax of
    the whole row."""
    chunks, weights, _, lses, lse, _ = split_states(scores, values, num_splits)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.4), sharex=True)
    full = torch.softmax(scores.double(), 0)
    for s, (c, w) in enumerate(zip(chunks, weights)):
        a.bar(c.numpy(), w.numpy(), width=1.0, color=f"C{s}",
              label=f"split {s}: lse = {lses[s]:.2f}")
        b.bar(c.numpy(), (w * torch.exp(lses[s] - lse)).numpy(), width=1.0,
              color=f"C{s}")
    b.plot(full.numpy(), "k.", ms=3, label="softmax of the whole row")
    a.set_title("partial states: each split normalizes over its own keys", fontsize=10)
    b.set_title(f"merged: × exp(lse_s − lse), lse = {lse:.2f}", fontsize=10)
    for ax in (a, b):
        ax.set_xlabel("key j")
    a.set_ylabel("weight")
    a.legend(fontsize=8)
    b.legend(fontsize=8)
    fig.tight_layout()
    return fig


@dataclass
class RequestMix:
    """Requests that all start at step 0 with a prompt, then generate one token per step
    until they finish; lengths drawn uniformly (seeded)."""
    n: int = 64
    prompt: tuple = (16, 1024)
    output: tuple = (16, 1024)
    max_len: int = 2048
    seed: int = 0

    def draw(self):
        rng = random.Random(self.seed)
        out = []
        for _ in range(self.n):
            p = rng.randint(*self.prompt)
            out.append((p, min(rng.randint(*self.output), self.max_len - p)))
        return out


def simulate_kv_memory(mix: RequestMix = RequestMix(), block_sizes=(16,)):
    """Positions of KV cache per step: tokens actually held, reserved by a contiguous
    cache (max_len per live request), and reserved in pages of each block size
    (whole pages)."""
    requests = mix.draw()
    steps = max(o for _, o in requests) + 1
    held, contiguous = [], []
    paged = {bs: [] for bs in block_sizes}
    for t in range(steps):
        live = [p + t for p, o in requests if t <= o]
        held.append(sum(live))
        contiguous.append(len(live) * mix.max_len)
        for bs in block_sizes:
            paged[bs].append(sum(math.ceil(n / bs) * bs for n in live))
    return dict(held=held, contiguous=contiguous, paged=paged)


def plot_kv_memory(sim, ax=None):
    """The reserved positions over the steps, and how much of it holds tokens."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(sim["contiguous"], label="contiguous: max_len per request", color="tab:red")
    for bs, series in sim["paged"].items():
        ax.plot(series, label=f"paged, pages of {bs}", color="tab:blue")
    ax.fill_between(range(len(sim["held"])), sim["held"], color="tab:green", alpha=0.4,
                    label="tokens held")
    ax.set_xlabel("decode step")
    ax.set_ylabel("KV-cache positions")
    ax.set_title("Memory reserved for a mix of requests", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def plot_decode_bandwidth(result, batches=None):
    """Recorded chapter 9 rows: % of the GPU's peak bandwidth against the cached length,
    one panel per batch size, one line per implementation, on a log scale (the book's
    kernels and SDPA's lie a decade and more apart)."""
    batches = batches or sorted({r["B"] for r in result.rows})
    fig, axes = panel_grid(len(batches), 2, 4.2, 3.2, sharey=True)
    for ax, b in zip(axes, batches):
        impls = {}
        for r in result.select(B=b):
            if r.get("ms") is not None:
                xs, ys = impls.setdefault(r["impl"], ([], []))
                xs.append(r["L"])
                ys.append(r["pct_peak"])
        draw_series(ax, impls)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(lambda y, _: f"{y:g}")
        ax.set_xlabel("cached length L")
        ax.set_title(f"B = {b}", fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[::2]:
        ax.set_ylabel("% of peak bandwidth")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{result.machine.get('gpu', '')} (cases with B·L > 2^19 not run: "
                 "their caches would not fit a T4)", fontsize=10)
    fig.tight_layout()
    return fig
