"""A whole torch extension file, loaded unmodified: ``load_extension(path_or_text)``.

Many kernels online come as one ``.cu`` file: kernels, ``#include <torch/extension.h>``,
a forward function that checks its inputs are on the GPU and allocates its outputs there
(``.to(torch::kCUDA)``, ``options().device(torch::kCUDA)``, ``at::cuda::
getCurrentCUDAStream()``), and a ``PYBIND11_MODULE`` that exposes it. On a GPU
:func:`load_extension` compiles the file as it is (``torch.utils.cpp_extension.load``).
On the emulator it compiles the same text as C++ with the emulator's source transforms,
the CPU standing in for the GPU: a request for a CUDA device or tensor names the CPU
(``kCUDA`` → ``kCPU``, ``.cuda()`` → ``.cpu()``, ``.is_cuda()`` → ``.is_cpu()``),
and c10/ATen's CUDA headers are small stand-ins (one stream, no-op device guards).
"""
from __future__ import annotations

import hashlib
import pathlib
import re
import time

import torch

from . import emulator, ptx
from .compile import (BACKENDS, CPU_FLAGS, EMULATOR_DIR, INCLUDE_DIR, CompileError,
                      _arch_list, _arch_number, _device_arch, _short_error,
                      build_directory, cpp_extension, default_backend,
                      quiet_build)

__all__ = ["load_extension"]

# CUDA device requests that name the CPU on the emulator: (pattern, replacement).
_TO_CPU = [(re.compile(r"\bkCUDA\b"), "kCPU"),
           (re.compile(r"\.cuda\(\s*\)"), ".cpu()"),
           (re.compile(r"\.is_cuda\(\s*\)"), ".is_cpu()")]


def _to_cpu(code: str) -> str:
    masked = emulator._blank(code, strings=True)
    edits = sorted((m.start(), m.end(), new) for pattern, new in _TO_CPU
                   for m in pattern.finditer(masked))
    for start, end, new in reversed(edits):
        code = code[:start] + new + code[end:]
    return code


def _source(path_or_text) -> tuple[str, pathlib.Path | None]:
    if isinstance(path_or_text, pathlib.Path) or (
            "\n" not in path_or_text and path_or_text.endswith((".cu", ".cpp"))):
        path = pathlib.Path(path_or_text)
        if not path.is_file():
            raise FileNotFoundError(f"no extension file {str(path)!r}")
        return path.read_text(), path.resolve()
    return path_or_text, None


def load_extension(path_or_text, name: str | None = None, *,
                   backend: str | None = None, arch: str | None = None,
                   include_dirs=(), verbose: bool = False):
    """Load a torch extension written as one CUDA file (a path, or its text), with its
    own ``PYBIND11_MODULE``, and return the module. ``backend``: "cuda", "emulator" or
    None for this machine's; ``arch`` as for :func:`attnbook.compile`. ``#include "x"``
    looks beside the file, in ``include_dirs``, then in the working directory."""
    text, path = _source(path_or_text)
    name = name or (path.stem if path else "extension")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name, re.ASCII):
        raise ValueError(f"extension name must be an ASCII identifier, got {name!r}")
    if "PYBIND11_MODULE" not in text:
        raise CompileError(f"{name}: the file defines no PYBIND11_MODULE; use "
                           "attnbook.compile for kernel text with a separate wrapper")
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if arch is not None and not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise ValueError(f"arch must look like 'sm_80', got {arch!r}")
    folders = [*([path.parent] if path else []), *map(pathlib.Path, include_dirs),
               pathlib.Path.cwd()]
    file_name = path.name if path else f"{name}.cu"
    if backend == "emulator":
        return _load_emulated(text, name, file_name, folders, arch or "sm_80", verbose)
    return _load_cuda(text, name, file_name, folders, arch or _device_arch(), verbose)


def _key(*parts) -> str:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:12]


def _load_emulated(text, name, file_name, folders, arch, verbose):
    try:
        code = ptx.to_cpp(emulator.to_cpp(_to_cpu(
            emulator.inline_headers(text, file_name, folders))))
    except SyntaxError as e:
        raise CompileError(f"{file_name}: {e}") from None
    cpp = ('#include <torch/extension.h>\n#include "cuda_emulator.h"\n'
           f'#line 1 "{file_name}"\n{code}\n')
    cflags = CPU_FLAGS + [f"-DATTNBOOK_EMU_ARCH={_arch_number(arch)}"]
    full = f"{name}_emulator_" + _key(cpp, *cflags, torch.__version__, *(
        p.read_text() for p in sorted(EMULATOR_DIR.rglob("*")) if p.is_file()))
    start = time.perf_counter()
    try:
        with quiet_build(verbose):
            module = cpp_extension.load_inline(
                name=full, cpp_sources=[cpp], extra_cflags=cflags,
                extra_include_paths=[str(p) for p in (EMULATOR_DIR, INCLUDE_DIR,
                                                      *folders)],
                no_implicit_headers=True, verbose=verbose)
    except (RuntimeError, ImportError) as e:
        raise CompileError(f"compiling {name} failed:\n"
                           f"{_short_error(str(e), text, file_name)}") from None
    print(f"compiled {name} for the CPU emulator in "
          f"{time.perf_counter() - start:.1f} s")
    public = [n for n in dir(module) if not n.startswith("_")]
    return emulator.guard_module(module, public)


def _load_cuda(text, name, file_name, folders, arch, verbose):
    full = f"{name}_cuda_" + _key(text, arch, torch.__version__)
    source = build_directory(full, verbose) / file_name
    if not source.is_file() or source.read_text() != text:
        source.write_text(text)
    start = time.perf_counter()
    try:
        with quiet_build(verbose), emulator._environ("TORCH_CUDA_ARCH_LIST",
                                                     _arch_list(arch)):
            module = cpp_extension.load(
                name=full, sources=[str(source)],
                extra_include_paths=[str(p) for p in folders],
                extra_cuda_cflags=["-O3"], verbose=verbose)
    except (RuntimeError, ImportError) as e:
        raise CompileError(f"compiling {name} failed:\n"
                           f"{_short_error(str(e), text, file_name)}") from None
    print(f"compiled {name} for {arch} in {time.perf_counter() - start:.1f} s")
    return module
