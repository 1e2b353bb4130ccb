"""Describe the machine a notebook runs on, in one printed paragraph."""
from __future__ import annotations

import platform

import torch

__all__ = ["describe_machine", "has_gpu"]


def has_gpu() -> bool:
    return torch.cuda.is_available()


def describe_machine() -> str:
    lines = [f"torch {torch.__version__}, Python {platform.python_version()}, "
             f"{platform.machine()}"]
    if has_gpu():
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        lines.append(f"GPU: {p.name}, compute capability {p.major}.{p.minor}, "
                     f"{p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs")
        lines.append(f"CUDA runtime {torch.version.cuda}")
    else:
        lines.append("no GPU: kernels run on the CPU emulator")
    return "\n".join(lines)
