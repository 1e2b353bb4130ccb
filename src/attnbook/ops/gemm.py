"""Chapter 4's GEMM kernels (``kernels/gemm.cuh``) as the registered op
``torch.ops.attnbook.gemm``."""
from __future__ import annotations

import torch

from ..args.attention import INT32_MAX, check_same_device, check_tensor
from .registry import extension

__all__ = ["gemm", "gemm_forward", "GEMM_STEPS"]

# step number -> what it adds
GEMM_STEPS = {1: "naive", 2: "shared-memory tiles", 3: "register blocking",
              4: "float4 loads"}


@torch.library.custom_op("attnbook::gemm", mutates_args=())
def gemm_forward(a: torch.Tensor, b: torch.Tensor, transpose_b: bool, step: int
                 ) -> torch.Tensor:
    """c[z] = a[z] · b[z] (or a[z] · b[z]ᵀ) for contiguous float32 [batch, ., .]
    operands."""
    module = extension("gemm").module(a.device)
    return module.gemm_batched(a, b, transpose_b, step)


@gemm_forward.register_fake
def _(a, b, transpose_b, step):
    return a.new_empty(a.shape[0], a.shape[1],
                       b.shape[1] if transpose_b else b.shape[2])


def gemm(a: torch.Tensor, b: torch.Tensor, *, transpose_b: bool = False,
         step: int = 4) -> torch.Tensor:
    """``a @ b`` (or ``a @ b.mT`` with ``transpose_b``) for float32 [M, K] or
    [batch, M, K] operands by step ``step`` of chapter 4 (see ``GEMM_STEPS``).
    Non-contiguous operands are copied first."""
    for name, t in (("a", a), ("b", b)):
        check_tensor(t, name)
        if t.dim() not in (2, 3):
            raise ValueError(f"{name} must be [M, K] or [batch, M, K], "
                             f"got shape {tuple(t.shape)}")
    check_same_device(dict(a=a, b=b))
    if a.dim() != b.dim() or (a.dim() == 3 and a.shape[0] != b.shape[0]):
        raise ValueError(f"a and b must have the same batch: {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    inner = b.shape[-1] if transpose_b else b.shape[-2]
    if a.shape[-1] != inner:
        raise ValueError(f"inner dimensions differ: a {tuple(a.shape)}, "
                         f"b {tuple(b.shape)}"
                         f"{' (transposed)' if transpose_b else ''}")
    if isinstance(step, bool) or not isinstance(step, int) or step not in GEMM_STEPS:
        raise ValueError(f"step must be one of {list(GEMM_STEPS)}, got {step!r}")
    if not isinstance(transpose_b, bool):
        raise TypeError(f"transpose_b must be a bool, got {transpose_b!r}")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-2] if transpose_b else b.shape[-1]
    if max(m * k, n * k, m * n, a.shape[0] if a.dim() == 3 else 1) > INT32_MAX:
        raise ValueError("each operand must have fewer than 2^31 elements per batch")
    batched = a.dim() == 3
    a3, b3 = (t.contiguous() if batched else t.contiguous()[None] for t in (a, b))
    c = gemm_forward(a3, b3, transpose_b, step)
    return c if batched else c[0]
