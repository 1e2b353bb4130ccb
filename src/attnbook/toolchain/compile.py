"""One way to compile a kernel, with two back ends.

``compile(name, cuda, wrapper, functions)`` takes CUDA kernel source (a file of
``attnbook/kernels`` read with :func:`kernel_source`, or text written in a cell) and a
thin torch-facing wrapper, and returns a loaded Python module built by
``torch.utils.cpp_extension.load_inline``:

* on a GPU, nvcc compiles the kernel for the current device's architecture only;
* without one, g++ compiles the same kernel text against the CPU emulator
  (:mod:`attnbook.emulator`), and its kernels run thread by thread on the CPU.

The wrapper is C++ that sees ``at::Tensor`` and the helpers of ``attnbook_torch.h``
(``attnbook::check_tensor``, ``attnbook::stream()``, ``attnbook::check_launch()``); it
declares the host launchers of the kernel text it calls. The same wrapper text serves
both back ends.
"""
from __future__ import annotations

import hashlib
import logging
import os
import pathlib
import platform
import re
import subprocess
import sys
import sysconfig
import time

import torch

from ..emulator import emulate, ptx
from ..emulator.cache import (LINK_FLAGS, build_directory, build_lock, cpp_extension,
                              quiet_build)
from .progress import build_progress

__all__ = ["compile", "kernel_source", "CompileError",
           "default_backend", "KERNEL_DIR", "INCLUDE_DIR"]

TOOLCHAIN_DIR = pathlib.Path(__file__).resolve().parent
KERNEL_DIR = TOOLCHAIN_DIR.parent / "kernels"
INCLUDE_DIR = TOOLCHAIN_DIR / "include"
EMULATOR_DIR = emulate.INCLUDE_DIR
BACKENDS = ("cuda", "emulator")
# Hidden visibility: each extension keeps its own emulator state (inline statics would
# otherwise be merged across every loaded extension as GNU unique symbols). -g1: line
# tables, to name the line of a fault (and of each access in the checked build).
# Stack-clash protection: a frame larger than the guard below a thread's stack touches
# each page on its way down, so it faults in the guard (a stack overflow) instead of
# writing into another thread's stack. A frame over 512 KiB is an error, as ptxas
# refuses a thread more local memory than that; FRAME_SLACK is what the host compiler
# adds to a kernel's own locals (alignment, saved registers: 16 bytes in the checked
# build for a 512 KiB array, which ptxas takes).
MAX_LOCAL_BYTES = 512 * 1024
FRAME_SLACK = 32


def _fma_flags() -> list[str]:
    """nvcc contracts a·b + c into one fused multiply-add (FFMA, a single rounding) by
    default (--fmad=true); the host compiler does the same where the CPU has FMA: every
    aarch64, an x86-64 whose /proc/cpuinfo lists fma. Elsewhere the emulator rounds the
    product and the sum apart, as nvcc --fmad=false does."""
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return ["-ffp-contract=fast"]
    try:
        cpu = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    has_fma = re.search(r"^flags\s*:.*\bfma\b", cpu, re.M)
    return ["-mfma", "-ffp-contract=fast"] if machine in ("x86_64", "amd64") and \
        has_fma else []


FMA_FLAGS = _fma_flags()
# -std=c++20 after torch's own -std (c++17 before torch 2.12): one language for the
# kernels on every torch, and one precompiled header (precompiled_header) per flag set.
CPU_FLAGS = ["-std=c++20", "-O2", "-fno-strict-aliasing", "-fvisibility=hidden", "-g1",
             "-fstack-clash-protection",
             f"-Werror=frame-larger-than={MAX_LOCAL_BYTES + FRAME_SLACK}",
             *FMA_FLAGS, "-DATTNBOOK_EMULATOR"]


_OLD_STD = re.compile(r"-std=(?:c|gnu)\+\+(?:98|03|0x|11|1y|14|1z|17)")


def emulator_cflags(flags) -> list[str]:
    """A user's host-compiler flags for an emulator build: a ``-std`` older than C++20
    (written for nvcc's host pass, as learn-cuda's and LeetCUDA's scripts pass
    ``-std=c++17``) gives way to the emulator's C++20, which its headers need."""
    return [f for f in map(str, flags) if not _OLD_STD.fullmatch(f)]


def fmad_off(cuda_flags) -> list[str]:
    """The host compiler's flag for nvcc's ``--fmad=false`` among ``cuda_flags``: no
    contraction (later flags win); none otherwise."""
    flags = [str(f) for f in cuda_flags]
    off = any(f in ("--fmad=false", "-fmad=false") for f in flags) or any(
        a in ("--fmad", "-fmad") and b == "false" for a, b in zip(flags, flags[1:]))
    return ["-ffp-contract=off"] if off else []
# The checked build (attnbook.sanitize, attnbook.profile): GCC calls __tsan_read4(addr)
# etc. before every access, which the emulator's emu_checked.h defines (no
# ThreadSanitizer runtime is linked). -fno-tree-sra keeps a float4 load one 16-byte
# access, as on a GPU, where GCC would split it into the four floats the code uses.
CHECKED_FLAGS = ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0",
                 "-fno-tree-sra",
                 "-DATTNBOOK_CHECKED"]


class CompileError(RuntimeError):
    """The compiler rejected the source; the message holds its errors, at the reader's
    lines."""


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


def arch_number(arch: str) -> int:
    """__CUDA_ARCH__ of an architecture: sm_80 -> 800, sm_90a -> 900."""
    m = re.fullmatch(r"sm_(\d+)(\d)a?", arch)
    return int(m.group(1)) * 100 + int(m.group(2)) * 10


def kernel_file_name(cuda: str) -> str:
    for path in KERNEL_DIR.glob("*.cu"):
        if path.read_text() == cuda:
            return path.name
    return "cell.cu"


def short_error(log: str, source: str = "", source_name: str = "",
                limit: int = 12) -> str:
    """The compiler's error lines, paths trimmed, and the reader's line the first one
    names."""
    lines = [ln for ln in log.splitlines()   # Error: is the host assembler's
             if re.search(r"\berror\b|[Ee]rror:|undefined reference", ln)]
    lines = [re.sub(r"^.*?/(?=[\w.]+\.(cu|cpp|h|cuh)[:(])", "", ln) for ln in lines]
    lines = list(dict.fromkeys(lines))[:limit]
    if not lines:
        return log[-3000:]
    for ln in lines:
        m = re.match(re.escape(source_name) + r"[:(](\d+)", ln) if source_name else None
        if m and 0 < int(m.group(1)) <= len(source.splitlines()):
            lines.append(f"  {m.group(1)} | "
                         f"{source.splitlines()[int(m.group(1)) - 1].strip()}")
            break
    return "\n".join(lines)


def _build_failure(log: str, cuda: str, wrapper: str, src_name: str, functions) -> str:
    """The errors of a failed build; where all of them are in the module definition
    load_inline appends after the wrapper (past its last line), because ``functions``
    names a function nobody defines, say that instead."""
    missing = [fn for fn in functions
               if not re.search(rf"\b{re.escape(fn)}\s*\(", wrapper + cuda)]
    short = short_error(log, cuda, src_name)
    last = wrapper.count("\n") + 1

    def generated(line):
        m = re.match(r"(wrapper|main\.cpp)[:(](\d+)", line)
        return m and (m.group(1) == "main.cpp" or int(m.group(2)) > last)

    errors = [ln for ln in short.splitlines() if re.search(r"[Ee]rror", ln)]
    if missing and errors and all(generated(ln) for ln in errors):
        return "\n".join(f"functions lists {fn!r}, but neither the wrapper nor the "
                         "kernel text defines a function of that name"
                         for fn in missing)
    if "frame-larger-than" in short:
        short += (f"\na GPU thread has at most {MAX_LOCAL_BYTES // 1024} KiB of local "
                  "memory (ptxas: 'too much local data'): make the local arrays "
                  "smaller, or keep the data in global memory")
    return short


def compile(name: str, cuda: str, wrapper: str, functions, *,
            backend: str | None = None, arch: str | None = None, verbose: bool = False,
            extra_cflags=(), include_dirs=(), checked: bool = False,
            guard_memory: bool = True):
    """Compile ``cuda`` (kernel text) with ``wrapper`` (torch-facing C++) into a module
    that exposes ``functions``. ``backend`` is "cuda", "emulator", or None for this
    machine's. ``arch`` ("sm_75", "sm_80", …) builds the CUDA back end for that
    architecture instead of the GPU's, which also works without a GPU when torch is a
    CUDA build (the module then loads but cannot launch); on the emulator it is the
    architecture ``__CUDA_ARCH__`` names (sm_80 by default). ``#include "x"`` looks in
    ``include_dirs``, then the working directory, then the package's kernels.

    On the emulator, the module's functions run the checked build of the same text
    (compiled on first use, with ``checked=True``) inside :func:`attnbook.sanitize` and
    :func:`attnbook.profile`; a checked build called outside them checks nothing.
    Outside them, with ``guard_memory``, each call's tensors lie between unmapped
    pages, so that a kernel's access a little past one raises
    :class:`~attnbook.emulator.KernelFault` instead of corrupting the heap
    (:mod:`attnbook.emulator.guard`; it copies the arguments: the package's ops, tested
    and given large tensors, turn it off)."""
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
    if checked and backend != "emulator":
        raise ValueError("checked=True builds for the emulator only")
    for fn in functions:   # on the emulator both share one translation unit
        bounds = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"
        if re.search(rf"__global__\s+{bounds}void\s+{bounds}{fn}\s*\(", cuda):
            raise CompileError(f"the wrapper function {fn!r} has the name of a kernel "
                               "in the CUDA source: give it another name "
                               f"({fn}_of, say)")
    src_name = kernel_file_name(cuda)
    given = [*map(pathlib.Path, include_dirs)]
    search = [*given, pathlib.Path.cwd(), KERNEL_DIR]
    header = '#include "attnbook_torch.h"\n'
    wrapper_text = f'#line 1 "wrapper"\n{wrapper}\n'
    if backend == "emulator":
        seen = set()   # a header pasted into the kernel text is not pasted again
        try:
            kernel_text = ptx.to_cpp(emulate.to_cpp(
                emulate.inline_headers(cuda, src_name, search, seen)))
        except SyntaxError as e:
            raise CompileError(f"{src_name}: {e}") from None
        pasted = emulate.inline_headers(wrapper, "wrapper", search, seen)
        wrapper_text = f'#line 1 "wrapper"\n{pasted}\n'
        cpp = [header + '#include "cuda_emulator.h"\n' + f'#line 1 "{src_name}"\n'
               + kernel_text + "\n" + wrapper_text]
        cu, target = [], EMULATOR_TARGET
        cflags = CPU_FLAGS + [f"-DATTNBOOK_EMU_ARCH={arch_number(arch or 'sm_80')}"]
        cflags, cuda_flags = cflags + emulator_cflags(extra_cflags), []
        if checked:
            cflags += CHECKED_FLAGS
        # every "header" the kernel and wrapper name from ``search`` is pasted in
        # above; the working directory stays off the include path, so that a build
        # made from another directory (a notebook's, a test's) is the same build
        includes = [*precompiled_header(cflags, verbose), EMULATOR_DIR, INCLUDE_DIR,
                    *given, KERNEL_DIR]
    else:
        target = arch or device_arch()
        cpp = [header + wrapper_text]
        # The kernel text is a real file beside the build (see _write_kernel_file):
        # nvcc's dependency list then names files that exist, and ninja reuses the
        # object.
        cu = [f'#include <cuda_runtime.h>\n#include "{KERNEL_SUBDIR}/{src_name}"\n']
        includes = [INCLUDE_DIR, *search]
        cflags = ["-O2"] + list(extra_cflags)
        # torch's extension builder hides cuda_fp16/bf16's operators and conversions;
        # the emulator and ptxas_report have them, so the same kernel text must see them
        # here too.
        cuda_flags = ["-O3", "-std=c++17", "-lineinfo"] + [
            f"-U__CUDA_NO_{m}__" for m in ("HALF_OPERATORS", "HALF_CONVERSIONS",
                                          "HALF2_OPERATORS", "BFLOAT16_CONVERSIONS")]
    key = hashlib.sha256("\0".join([backend, target, *cpp, *cu, cuda, *cflags,
                                    *cuda_flags, *functions, *map(str, includes),
                                    *emulator_headers(),
                                    (INCLUDE_DIR / "attnbook_torch.h").read_text(),
                                    torch.__version__]).encode()).hexdigest()[:12]
    full_name = f"{name}_{'checked' if checked else backend}_{key}"
    if backend == "cuda":
        _write_kernel_file(full_name, src_name, cuda, verbose)
    start = time.perf_counter()
    env_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if backend == "cuda":   # one architecture compiles fastest
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list(target)
    folder = build_directory(full_name, verbose)
    try:
        with quiet_build(verbose), build_lock(full_name, verbose), build_progress(
                name + (" (checked)" if checked else ""), target, folder,
                (folder / f"{full_name}.so").exists()) as progress:
            module = cpp_extension.load_inline(
                name=full_name, cpp_sources=cpp, cuda_sources=cu or None,
                functions=functions,
                extra_cflags=cflags,
                extra_cuda_cflags=cuda_flags or None,
                extra_ldflags=list(LINK_FLAGS),
                extra_include_paths=[str(p) for p in includes],
                with_cuda=backend == "cuda", no_implicit_headers=True, verbose=verbose)
    except (RuntimeError, ImportError) as e:
        why = _build_failure(str(e), cuda, wrapper, src_name, functions)
        raise CompileError(f"compiling {name} failed:\n{why}") from None
    finally:
        if backend == "cuda":
            if env_arch is None:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
            else:
                os.environ["TORCH_CUDA_ARCH_LIST"] = env_arch
    # One line once the build is done, so that it never splits a cell's output.
    report_build(name, checked, target, time.perf_counter() - start,
                 progress=progress)
    if backend == "emulator":
        twin = None if checked else _Twin(name, cuda, wrapper, functions,
                                          dict(arch=arch, extra_cflags=extra_cflags,
                                               include_dirs=include_dirs))
        emulate.guard_module(module, functions, twin, guard_memory)
    return module


LOG = logging.getLogger("attnbook")
EMULATOR_TARGET = "the CPU emulator"


def report_build(name: str, checked: bool, target: str, seconds: float,
                 out=None, progress=None) -> None:
    """The line a finished build leaves: in place of the line shown while it ran
    where ``progress`` (:func:`~attnbook.toolchain.progress.build_progress`'s
    callback) shows one; else printed (to ``out``, by default stdout) for a GPU build,
    where a reader waits up to a minute on the first one, and where ``out`` is given;
    an emulator build is an INFO record of the ``attnbook`` logger instead, so that it
    leaves no line in a notebook's output."""
    line = (f"compiled {name}{' (checked)' if checked else ''} for {target} in "
            f"{seconds:.1f} s")
    if progress is not None and progress(line):
        return
    if target == EMULATOR_TARGET and out is None:
        LOG.info(line)
    else:
        print(line, file=out or sys.stdout)


class _Twin:
    """The checked build of an emulator module, compiled on first use."""

    def __init__(self, *args):
        self.args, self.module = args, None

    def __call__(self):
        if self.module is None:
            name, cuda, wrapper, functions, options = self.args
            self.module = compile(name, cuda, wrapper, functions, backend="emulator",
                                  checked=True, **options)
        return self.module


KERNEL_SUBDIR = "kernel"


def precompiled_header(cflags, verbose: bool = False) -> list[pathlib.Path]:
    """[the folder of ``attnbook_torch.h.gch``] for an emulator build with ``cflags``,
    built on first use; [] where it cannot be built.

    Every emulator extension's first line includes ``attnbook_torch.h``, whose ATen and
    pybind headers take g++ more than half of a small kernel's build (4–5 s of 8 on two
    cores). Put first on the include path, the folder's precompiled copy stands in for
    them (a few hundred MB, once per flag set). g++ takes it only where it was made
    with the same options (torch's, then ``cflags``) and skips it otherwise."""
    text = (INCLUDE_DIR / "attnbook_torch.h").read_text()
    system = [*cpp_extension.include_paths(), sysconfig.get_path("include")]
    flags = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-I{EMULATOR_DIR}", f"-I{INCLUDE_DIR}",
             *(f"-isystem{p}" for p in system), "-fPIC", *cflags]
    cxx = os.environ.get("CXX", "c++")
    key = hashlib.sha256("\0".join([cxx, text, *flags, *emulator_headers(),
                                    torch.__version__]).encode()).hexdigest()[:12]
    name = f"attnbook_pch_{key}"
    folder = build_directory(name, verbose)
    gch = folder / "attnbook_torch.h.gch"
    with build_lock(name, verbose):
        if not gch.is_file() and not (folder / "failed").is_file():
            # made from a copy beside it, which a second #include then finds
            header = write_if_changed(folder / "attnbook_torch.h", text)
            made = subprocess.run([cxx, *flags, "-x", "c++-header", header, "-o",
                                   str(folder / "partial.gch")],
                                  capture_output=True, text=True)
            if made.returncode:   # the builds go on without it, as slowly as before
                (folder / "failed").write_text(made.stderr)
            else:
                os.replace(folder / "partial.gch", gch)
    return [folder] if gch.is_file() else []


def emulator_headers() -> list[str]:
    """The text of every header of the emulator: part of each build's cache key, so that
    a changed header rebuilds what includes it."""
    return [p.read_text() for p in sorted(EMULATOR_DIR.rglob("*")) if p.is_file()]


def write_if_changed(path: pathlib.Path, text: str) -> str:
    """Write ``text`` to ``path`` unless it holds it already, so that the file's time
    stamp, and with it ninja's verdict, stays put; returns the path as a string."""
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(path)


def _write_kernel_file(full_name: str, src_name: str, text: str, verbose: bool) -> None:
    """Put the kernel text in ``<build dir>/kernel/<src_name>``."""
    folder = build_directory(full_name, verbose) / KERNEL_SUBDIR
    write_if_changed(folder / src_name, text)
