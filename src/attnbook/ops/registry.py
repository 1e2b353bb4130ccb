"""Every extension the package builds, one line each: its kernel file and its C++
wrapper (both in ``attnbook/kernels``), the wrapper functions Python calls, the chapter
that teaches the kernel and the registered op (``torch.ops.attnbook.<op>``) that calls
it. The ops, the CUDA build check, the GPU run's build stage and the tests' list of
sanitized launches all read this table.

Adding an op touches its kernel file, its wrapper, its Python function and one line
here."""
from __future__ import annotations

import dataclasses

import torch

from cuda_emulator.build import arch_number

from ..toolchain.compile import compile, kernel_source

__all__ = ["Extension", "EXTENSIONS", "extension", "markdown_table"]


@dataclasses.dataclass(frozen=True)
class Extension:
    name: str              # of the build, and its folder in the extension cache
    kernel: str            # kernels/<kernel>: the kernels and their host launcher
    wrapper: str           # kernels/<wrapper>: the torch-facing C++ functions
    functions: tuple       # the wrapper's functions, as the module's attributes
    chapter: str           # the chapter that teaches the kernel
    op: str                # torch.ops.attnbook.<op> calls it
    test: str              # tests/<test>: its kernels against the reference
    arch: str | None = None   # an architecture's own code ("sm_90a"): the emulator
                              # builds for it, and a GPU of that architecture does

    def module(self, device):
        """The loaded extension for ``device`` (a CUDA device builds with nvcc for its
        GPU, anything else for the emulator), compiled once per process and back
        end."""
        device = torch.device(device)
        backend = "cuda" if device.type == "cuda" else "emulator"
        arch = self.arch if backend == "emulator" or (
            self.arch and arch_number(self.arch) == _capability(device)) else None
        key = (self.name, backend)
        if key not in _modules:
            _modules[key] = compile(self.name, kernel_source(self.kernel),
                                    kernel_source(self.wrapper), self.functions,
                                    backend=backend, arch=arch, guard_memory=False)
        return _modules[key]


def _capability(device) -> int:
    major, minor = torch.cuda.get_device_capability(device)
    return 100 * major + 10 * minor


_modules = {}

EXTENSIONS = (
    Extension("naive_attention", "naive_attention.cu", "naive_attention_wrapper.cpp",
              ("forward",), "2", "three_kernel_forward", "test_attention.py"),
    Extension("softmax", "softmax.cu", "softmax_wrapper.cpp", ("softmax_last_dim",),
              "3", "softmax", "test_softmax.py"),
    Extension("gemm", "gemm.cu", "gemm_wrapper.cpp", ("gemm_batched",), "4", "gemm",
              "test_gemm.py"),
    Extension("tiled_attention", "tiled_attention.cu", "tiled_attention_wrapper.cpp",
              ("forward",), "4", "three_kernel_forward", "test_attention.py"),
    Extension("flash_fp32", "flash_fp32.cu", "flash_fp32_wrapper.cpp",
              ("flash_forward",), "7", "flash_forward", "test_flash_fp32.py"),
    Extension("flash_tc", "flash_tc.cu", "flash_tc_wrapper.cpp", ("forward",), "8",
              "flash_tc_forward", "test_flash_tc.py"),
    Extension("kv_cache", "kv_cache.cu", "kv_cache_wrapper.cpp", ("append",), "9",
              "kv_cache_append", "test_decode.py"),
    Extension("decode", "decode.cu", "decode_wrapper.cpp", ("decode",), "9",
              "decode_attention", "test_decode.py"),
    Extension("flash_bwd_fp32", "flash_bwd_fp32.cu", "flash_bwd_fp32_wrapper.cpp",
              ("backward",), "11", "flash_backward", "test_backward.py"),
    Extension("flash_bwd_tc", "flash_bwd_tc.cu", "flash_bwd_tc_wrapper.cpp",
              ("backward",), "11", "flash_tc_backward", "test_flash_bwd_tc.py"),
    Extension("flash_hopper", "flash_hopper.cu", "flash_hopper_wrapper.cpp",
              ("forward",), "12", "flash_hopper_forward", "test_flash_hopper.py",
              arch="sm_90a"),
)
_BY_NAME = {e.name: e for e in EXTENSIONS}


def extension(name: str) -> Extension:
    """The registry's line for extension ``name``."""
    if name not in _BY_NAME:
        raise KeyError(f"no extension {name!r}; there are {sorted(_BY_NAME)}")
    return _BY_NAME[name]


def markdown_table() -> str:
    """The registry as docs/developing.md's table: chapter, kernel file, wrapper, op,
    test."""
    rows = ["| chapter | kernels | wrapper | op | test |",
            "| --- | --- | --- | --- | --- |"]
    rows += [f"| {e.chapter} | `kernels/{e.kernel}` | `kernels/{e.wrapper}` | "
             f"`torch.ops.attnbook.{e.op}` | `tests/{e.test}` |" for e in EXTENSIONS]
    return "\n".join(rows)
