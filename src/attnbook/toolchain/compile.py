"""One way to compile a kernel, with two back ends.

``compile(name, cuda, wrapper, functions)`` takes CUDA kernel source (a file of
``attnbook/kernels`` read with :func:`kernel_source`, or text written in a cell) and a
thin torch-facing wrapper, and returns a loaded Python module built by
``torch.utils.cpp_extension.load_inline``:

* on a GPU, nvcc compiles the kernel for the current device's architecture only;
* without one, g++ compiles the same kernel text against the CPU emulator
  (the package :mod:`cuda_emulator`), and its kernels run thread by thread on the CPU.

The wrapper is C++ that sees ``at::Tensor`` and the helpers of ``attnbook_torch.h``
(``attnbook::check_tensor``, ``attnbook::stream()``, ``attnbook::check_launch()``); it
declares the host launchers of the kernel text it calls. The same wrapper text serves
both back ends.
"""
from __future__ import annotations

import pathlib
import re

import torch

from cuda_emulator import Build, sanitizer
from cuda_emulator.build import (CompileError, building, missing_functions,
                                 short_error, write_if_changed)
from cuda_emulator.cache import LINK_FLAGS, build_directory, cache_key, cpp_extension
from cuda_emulator.emulate import set_env

__all__ = ["compile", "kernel_source", "CompileError",
           "default_backend", "KERNEL_DIR", "INCLUDE_DIR"]

TOOLCHAIN_DIR = pathlib.Path(__file__).resolve().parent
KERNEL_DIR = TOOLCHAIN_DIR.parent / "kernels"
INCLUDE_DIR = TOOLCHAIN_DIR / "include"
TORCH_HEADER = INCLUDE_DIR / "attnbook_torch.h"
# the wrapper's helpers: an access made there is named by the line that called them
sanitizer.library_folder(INCLUDE_DIR)
BACKENDS = ("cuda", "emulator")
# torch's extension builder hides cuda_fp16/bf16's operators and conversions; the
# emulator and ptxas_report have them, so the same kernel text must see them here too.
NVCC_FLAGS = ["-O3", "-std=c++17", "-lineinfo"] + [
    f"-U__CUDA_NO_{m}__" for m in ("HALF_OPERATORS", "HALF_CONVERSIONS",
                                  "HALF2_OPERATORS", "BFLOAT16_CONVERSIONS")]


def kernel_source(filename: str) -> str:
    """The text of a file of ``attnbook/kernels``: a kernel file
    (``kernel_source("softmax.cu")``), a header, or a C++ wrapper
    (``kernel_source("softmax_wrapper.cpp")``)."""
    path = KERNEL_DIR / filename
    if not path.is_file():
        known = sorted(p.name for p in KERNEL_DIR.iterdir() if p.is_file())
        raise FileNotFoundError(f"no kernel file {filename!r}; there are {known}")
    return path.read_text()


def default_backend() -> str:
    return "cuda" if torch.cuda.is_available() else "emulator"


def device_arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def arch_list(arch: str) -> str:
    """TORCH_CUDA_ARCH_LIST's spelling of an architecture: sm_80 -> 8.0, sm_90a ->
    9.0a."""
    m = re.fullmatch(r"sm_(\d+)(\d)(a?)", arch)
    return f"{m.group(1)}.{m.group(2)}{m.group(3)}"


def kernel_file_name(cuda: str) -> str:
    for path in KERNEL_DIR.glob("*.cu"):
        if path.read_text() == cuda:
            return path.name
    return "cell.cu"


def compile(name: str, cuda: str, wrapper: str, functions, *,
            backend: str | None = None, arch: str | None = None, verbose: bool = False,
            extra_cflags=(), include_dirs=(), guard_memory: bool = True):
    """Compile ``cuda`` (kernel text) with ``wrapper`` (torch-facing C++) into a module
    that exposes ``functions``. ``backend`` is "cuda", "emulator", or None for this
    machine's. ``arch`` ("sm_75", "sm_80", …) builds the CUDA back end for that
    architecture instead of the GPU's, which also works without a GPU when torch is a
    CUDA build (the module then loads but cannot launch); on the emulator it is the
    architecture ``__CUDA_ARCH__`` names (sm_80 by default). ``#include "x"`` looks in
    ``include_dirs``, then the working directory, then the package's kernels.

    On the emulator (:class:`cuda_emulator.Build`), the module's functions run the
    checked build of the same text (compiled on first use) inside
    :func:`attnbook.sanitize` and :func:`attnbook.profile`. Outside them, with
    ``guard_memory``, each call's tensors lie between unmapped pages, so that a
    kernel's access a little past one raises :class:`~cuda_emulator.KernelFault`
    instead of corrupting the heap (:mod:`cuda_emulator.guard`; it copies the
    arguments: the package's ops, tested and given large tensors, turn it off)."""
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "cuda" and arch is None and not torch.cuda.is_available():
        raise RuntimeError("backend='cuda' needs a GPU (or arch='sm_XY' to build "
                           "without running); use backend='emulator' to run on the CPU")
    if arch is not None and not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise ValueError(f"arch must look like 'sm_80', got {arch!r}")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"extension name must be an ASCII identifier, got {name!r}")
    functions = [functions] if isinstance(functions, str) else list(functions)
    for fn in functions:   # on the emulator both share one translation unit
        bounds = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"
        if re.search(rf"__global__\s+{bounds}void\s+{bounds}{fn}\s*\(", cuda):
            raise CompileError(f"the wrapper function {fn!r} has the name of a kernel "
                               "in the CUDA source: give it another name "
                               f"({fn}_of, say)")
    src_name = kernel_file_name(cuda)
    given = [*map(pathlib.Path, include_dirs)]
    search = [*given, pathlib.Path.cwd(), KERNEL_DIR]
    if backend == "emulator":
        # every "header" the kernel and wrapper name from ``search`` is pasted in;
        # the working directory stays off the include path, so that a build made from
        # another directory (a notebook's, a test's) is the same build
        build = Build(name, [(cuda, src_name)], folders=search,
                      includes=[INCLUDE_DIR, *given, KERNEL_DIR],
                      arch=arch or "sm_80", cflags=extra_cflags,
                      head=f'#include "{TORCH_HEADER.name}"\n'
                           '#include "cuda_emulator.h"\n',
                      wrapper=wrapper, pch=TORCH_HEADER, verbose=verbose)
        return build.functions(functions, guard_memory)
    return _nvcc(name, cuda, wrapper, functions, src_name, arch, search,
                 extra_cflags, verbose)


def _nvcc(name, cuda, wrapper, functions, src_name, arch, search, cflags, verbose):
    """The CUDA back end of :func:`compile`: nvcc for ``arch`` (the GPU's when None)."""
    target = arch or device_arch()
    cpp = [f'#include "{TORCH_HEADER.name}"\n#line 1 "wrapper"\n{wrapper}\n']
    # The kernel text is a real file beside the build: nvcc's dependency list then
    # names files that exist, and ninja reuses the object.
    cu = [f'#include <cuda_runtime.h>\n#include "{KERNEL_SUBDIR}/{src_name}"\n']
    includes = [INCLUDE_DIR, *search]
    cflags = ["-O2", *cflags]
    full = f"{name}_cuda_" + cache_key(target, *cpp, *cu, cuda, *cflags, *NVCC_FLAGS,
                                       *functions, *includes, TORCH_HEADER.read_text(),
                                       torch.__version__)
    write_if_changed(build_directory(full, verbose) / KERNEL_SUBDIR / src_name, cuda)

    def errors(log):
        short = short_error(log, cuda, src_name)
        why = missing_functions(log, short, cuda, wrapper, functions)
        return f"compiling {name} failed:\n{why or short}"

    # one architecture compiles fastest
    with set_env("TORCH_CUDA_ARCH_LIST", arch_list(target)), building(
            name, full, target, errors, verbose=verbose):
        return cpp_extension.load_inline(
            name=full, cpp_sources=cpp, cuda_sources=cu, functions=functions,
            extra_cflags=cflags, extra_cuda_cflags=NVCC_FLAGS,
            extra_ldflags=list(LINK_FLAGS),
            extra_include_paths=[str(p) for p in includes], with_cuda=True,
            no_implicit_headers=True, verbose=verbose)


KERNEL_SUBDIR = "kernel"
