"""Chapter 3's softmax kernels (``kernels/softmax.cuh``) as the registered op
``torch.ops.attnbook.softmax``."""
from __future__ import annotations

import torch

from ..args.attention import INT32_MAX, check_tensor
from .registry import extension

__all__ = ["softmax", "softmax_forward", "SOFTMAX_KERNELS"]

SOFTMAX_KERNELS = ("naive", "block_tree", "warp", "block_warps", "online",
                   "online_lean")


@torch.library.custom_op("attnbook::softmax", mutates_args=())
def softmax_forward(x: torch.Tensor, kernel: str) -> torch.Tensor:
    """Softmax over the last dimension of a contiguous float32 tensor by ``kernel``."""
    module = extension("softmax").module(x.device)
    return module.softmax_last_dim(x, kernel)


@softmax_forward.register_fake
def _(x, kernel):
    return torch.empty_like(x)


def softmax(x: torch.Tensor, kernel: str = "online") -> torch.Tensor:
    """softmax over the last dimension of a float32 tensor by one of the chapter's
    kernels (a non-contiguous ``x`` is copied first). Like ``torch.softmax``, a row
    holding NaN or +inf gives NaN; unlike it, a row that is entirely −inf gives zeros
    (torch: NaN)."""
    check_tensor(x, "x", min_dim=1)
    if kernel not in SOFTMAX_KERNELS:
        raise ValueError(f"kernel must be one of {SOFTMAX_KERNELS}, got {kernel!r}")
    n = x.shape[-1]
    if n > INT32_MAX or (n and x.numel() // n > INT32_MAX):
        raise ValueError(f"x of shape {tuple(x.shape)} is too large: rows and row "
                         "length must be below 2^31")
    return softmax_forward(x.contiguous(), kernel)
