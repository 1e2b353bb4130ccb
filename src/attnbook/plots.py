"""The book's standard figures."""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from . import masks

__all__ = ["draw_mask", "mask_gallery"]

# (title, Sq, Sk, rules) of each panel of the gallery of mask kinds.
GALLERY = [
    ("causal", 12, 12, dict(causal=True)),
    ("causal, Sq < Sk\n(bottom-right)", 4, 12, dict(causal=True)),
    ("key padding\n(length 9)", 12, 12, dict(key_lengths=torch.tensor([9]))),
    ("strided (stride 3)", 12, 12, dict(stride=3)),
    ("strided + causal", 12, 12, dict(stride=3, causal=True)),
    ("sliding window (4)\n+ causal", 12, 12, dict(window=4, causal=True)),
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


def mask_gallery():
    """One figure with every kind of mask the book builds kernels for."""
    fig, axes = plt.subplots(1, len(GALLERY), figsize=(3 * len(GALLERY), 3.4))
    for ax, (title, sq, sk, rules) in zip(axes, GALLERY):
        draw_mask(ax, masks.allowed(sq, sk, **rules)[0, 0], title)
    fig.tight_layout()
    return fig
