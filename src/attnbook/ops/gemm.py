"""Chapter 4's GEMM kernels (``kernels/gemm.cuh``), callable from Python."""
from __future__ import annotations

import torch

from ..toolchain.compile import package_module

__all__ = ["gemm", "GEMM_STEPS"]

# step number -> what it adds
GEMM_STEPS = {1: "naive", 2: "shared-memory tiles", 3: "register blocking", 4: "float4 loads"}

_WRAPPER = r"""
bool gemm_forward(const float*, const float*, float*, int, int, int, int, bool, int, cudaStream_t);

at::Tensor gemm_batched(at::Tensor a, at::Tensor b, bool b_transposed, int64_t step) {
  attnbook::check_tensor(a, "a", at::kFloat);
  attnbook::check_tensor(b, "b", at::kFloat);
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0), "a and b must be [batch, ., .]");
  const int64_t M = a.size(1), K = a.size(2), N = b_transposed ? b.size(1) : b.size(2);
  TORCH_CHECK((b_transposed ? b.size(2) : b.size(1)) == K, "inner dimensions differ");
  at::Tensor c = a.new_empty({a.size(0), M, N});
  TORCH_CHECK(gemm_forward(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), int(a.size(0)),
                           int(M), int(N), int(K), b_transposed, int(step), attnbook::stream()),
              "unknown GEMM step ", step);
  attnbook::check_launch();
  return c;
}
"""


def gemm(a: torch.Tensor, b: torch.Tensor, *, transpose_b: bool = False, step: int = 4) -> torch.Tensor:
    """``a @ b`` (or ``a @ b.mT`` with ``transpose_b``) for float32 [M, K] or [batch, M, K]
    operands by step ``step`` of chapter 4 (see ``GEMM_STEPS``)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {t.dtype}")
        if t.dim() not in (2, 3):
            raise ValueError(f"{name} must be [M, K] or [batch, M, K], got shape {tuple(t.shape)}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (call .contiguous() first)")
        if t.device != a.device or t.device.type not in ("cuda", "cpu"):
            raise ValueError(f"a and b must be on one CUDA device (or the CPU), got {a.device} and {b.device}")
    if a.dim() != b.dim() or (a.dim() == 3 and a.shape[0] != b.shape[0]):
        raise ValueError(f"a and b must have the same batch: {tuple(a.shape)} and {tuple(b.shape)}")
    inner = b.shape[-1] if transpose_b else b.shape[-2]
    if a.shape[-1] != inner:
        raise ValueError(f"inner dimensions differ: a {tuple(a.shape)}, b {tuple(b.shape)}"
                         f"{' (transposed)' if transpose_b else ''}")
    if step not in GEMM_STEPS:
        raise ValueError(f"step must be one of {list(GEMM_STEPS)}, got {step!r}")
    batched = a.dim() == 3
    backend = "cuda" if a.device.type == "cuda" else "emulator"
    module = package_module("gemm", "gemm.cu", _WRAPPER, ["gemm_batched"], backend)
    c = module.gemm_batched(a if batched else a[None], b if batched else b[None], transpose_b, step)
    return c if batched else c[0]
