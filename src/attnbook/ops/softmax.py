"""Chapter 3's softmax kernels (``kernels/softmax.cuh``), callable from Python."""
from __future__ import annotations

import torch

from ..toolchain.compile import package_module

__all__ = ["softmax", "SOFTMAX_KERNELS"]

SOFTMAX_KERNELS = ("naive", "block_tree", "warp", "block_warps", "online")

_WRAPPER = r"""
bool softmax_forward(const char*, const float*, float*, int, int, cudaStream_t);

at::Tensor softmax_last_dim(at::Tensor x, std::string kernel) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  at::Tensor y = x.new_empty(x.sizes());
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  TORCH_CHECK(rows < (1ll << 31) && n < (1ll << 31), "x is too large");
  TORCH_CHECK(softmax_forward(kernel.c_str(), x.data_ptr<float>(), y.data_ptr<float>(), int(rows), int(n),
                              attnbook::stream()), "unknown softmax kernel ", kernel);
  attnbook::check_launch();
  return y;
}
"""


def softmax(x: torch.Tensor, kernel: str = "online") -> torch.Tensor:
    """softmax over the last dimension of a contiguous float32 tensor by one of the chapter's
    kernels. Rows that are entirely −inf give zeros (``torch.softmax`` gives NaN)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if kernel not in SOFTMAX_KERNELS:
        raise ValueError(f"kernel must be one of {SOFTMAX_KERNELS}, got {kernel!r}")
    if x.dtype != torch.float32:
        raise TypeError(f"x must be float32, got {x.dtype}")
    if not x.is_contiguous():
        raise ValueError("x must be contiguous (call .contiguous() first)")
    if x.device.type not in ("cuda", "cpu"):
        raise ValueError(f"x must be on a CUDA device (or the CPU for the emulator), got {x.device}")
    backend = "cuda" if x.device.type == "cuda" else "emulator"
    return package_module("softmax", "softmax.cu", _WRAPPER, ["softmax_last_dim"], backend).softmax_last_dim(x, kernel)
