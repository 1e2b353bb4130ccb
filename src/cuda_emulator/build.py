"""One way to build CUDA text for the emulator: :class:`Build`.

Kernel text with a torch-facing wrapper, whole torch extensions and programs with
their own ``main()`` all go the same way: each source file is translated (its local
headers pasted in, then :func:`emulate.to_cpp` and :func:`ptx.to_cpp`), compiled by the
host compiler with one set of flags (:func:`Build.flags`), into a folder of the
extension cache named by one key (:func:`Build.full_name`), under one lock, with one
line of progress and one error report. Only the product differs: a module of
functions (:meth:`Build.functions`), an extension's module or library
(:meth:`Build.library`), an executable (:meth:`Build.executable`). The checked build
(``checked=True``: every access reported to :mod:`.sanitizer`) is the same build with
:data:`CHECKED_FLAGS`; :class:`Twin` makes it on first use.
"""
from __future__ import annotations

import contextlib
import functools
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

from . import emulate, ptx
from .cache import (LINK_FLAGS, build_directory, build_lock, cache_key, cpp_extension,
                    quiet_build)
from .progress import build_progress

__all__ = ["Build", "Twin", "CompileError", "building", "CPU_FLAGS", "CHECKED_FLAGS",
           "FMA_FLAGS", "EMULATOR_TARGET", "fmad_off", "report_build", "short_error",
           "precompiled_header", "write_if_changed"]

EMULATOR_DIR = emulate.INCLUDE_DIR
EMULATOR_TARGET = "the CPU emulator"
LOG = logging.getLogger("cuda_emulator")
# Hidden visibility: each extension keeps its own emulator state (inline statics would
# otherwise be merged across every loaded extension as GNU unique symbols). -g1: line
# tables, to name the line of a fault (and of each access in the checked build).
# Stack-clash protection: a frame larger than the guard below a thread's stack touches
# each page on its way down, so it faults in the guard (a stack overflow) instead of
# writing into another thread's stack. A frame over 512 KiB is an error, as ptxas
# refuses a thread more local memory than that; FRAME_SLACK is what the host compiler
# adds to a kernel's own locals (alignment, saved registers: 16 bytes in the checked
# build for a 512 KiB array, which ptxas takes). A program's main() is host code, which
# may keep large arrays on its stack: there the limit is off, as kernel frames cannot
# be told apart from it.
MAX_LOCAL_BYTES = 512 * 1024
FRAME_SLACK = 32
FRAME_LIMIT = f"-Werror=frame-larger-than={MAX_LOCAL_BYTES + FRAME_SLACK}"


@functools.cache
def _cpu_flags() -> str:
    """The flags line of /proc/cpuinfo ("" where there is none)."""
    try:
        cpu = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    found = re.search(r"^flags\s*:(.*)$", cpu, re.M)
    return f" {found.group(1)} " if found else ""


def _x86_has(flag: str) -> bool:
    return platform.machine().lower() in ("x86_64", "amd64") and \
        f" {flag} " in _cpu_flags()


def _fma_flags() -> list[str]:
    """nvcc contracts a·b + c into one fused multiply-add (FFMA, a single rounding) by
    default (--fmad=true); the host compiler does the same where the CPU has FMA: every
    aarch64, an x86-64 whose /proc/cpuinfo lists fma. Elsewhere the emulator rounds the
    product and the sum apart, as nvcc --fmad=false does."""
    if platform.machine().lower() in ("aarch64", "arm64"):
        return ["-ffp-contract=fast"]
    return ["-mfma", "-ffp-contract=fast"] if _x86_has("fma") else []


FMA_FLAGS = _fma_flags()
# half <-> float by the x86 instruction (F16C) where the CPU has it: torch's own
# conversion, which __half uses, takes it when the compiler may (the same values, round
# to nearest even, in one instruction instead of a dozen)
F16C_FLAGS = ["-mf16c"] if _x86_has("f16c") else []
# -std=c++20 after torch's own -std (c++17 before torch 2.12): one language for the
# kernels on every torch, and one precompiled header (precompiled_header) per flag set.
CPU_FLAGS = ["-std=c++20", "-O2", "-fno-strict-aliasing", "-fvisibility=hidden", "-g1",
             "-fstack-clash-protection", FRAME_LIMIT, *FMA_FLAGS, *F16C_FLAGS,
             "-DATTNBOOK_EMULATOR"]
# The checked build (sanitize, profile): GCC calls __tsan_read4(addr) etc. before every
# access, which the emulator's emu_checked.h defines (no ThreadSanitizer runtime is
# linked). -fno-tree-sra keeps a float4 load one 16-byte access, as on a GPU, where GCC
# would split it into the four floats the code uses.
CHECKED_FLAGS = ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0",
                 "-fno-tree-sra", "-DATTNBOOK_CHECKED"]
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


def arch_number(arch: str) -> int:
    """__CUDA_ARCH__ of an architecture: sm_80 -> 800, sm_90a -> 900."""
    m = re.fullmatch(r"sm_(\d+)(\d)a?", arch)
    if m is None:
        raise ValueError(f"arch must look like 'sm_80', got {arch!r}")
    return int(m.group(1)) * 100 + int(m.group(2)) * 10


class CompileError(RuntimeError):
    """The compiler rejected the source; the message holds its errors, at the reader's
    lines."""


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


def missing_functions(log: str, short: str, text: str, wrapper: str,
                      functions) -> str | None:
    """Where every error of a failed build of ``functions`` lies in the module
    definition ``load_inline`` appends after the wrapper (past its last line), because
    ``functions`` names a function neither text defines: a line saying so; else
    None."""
    missing = [fn for fn in functions
               if not re.search(rf"\b{re.escape(fn)}\s*\(", wrapper + text)]
    last = wrapper.count("\n") + 1

    def generated(line):
        m = re.match(r"(wrapper|main\.cpp)[:(](\d+)", line)
        return m and (m.group(1) == "main.cpp" or int(m.group(2)) > last)

    errors = [ln for ln in short.splitlines() if re.search(r"[Ee]rror", ln)]
    if missing and errors and all(generated(ln) for ln in errors):
        return "\n".join(f"functions lists {fn!r}, but neither the wrapper nor the "
                         "kernel text defines a function of that name"
                         for fn in missing)
    return None


def report_build(name: str, checked: bool, target: str, seconds: float,
                 out=None, progress=None) -> None:
    """The line a finished build leaves: in place of the line shown while it ran
    where ``progress`` (:func:`~cuda_emulator.progress.build_progress`'s callback)
    shows one; else printed (to ``out``, by default stdout) for a GPU build, where a
    reader waits up to a minute on the first one, and where ``out`` is given; an
    emulator build is an INFO record of the ``cuda_emulator`` logger instead, so that
    it leaves no line in a notebook's output."""
    line = (f"compiled {name}{' (checked)' if checked else ''} for {target} in "
            f"{seconds:.1f} s")
    if progress is not None and progress(line):
        return
    if target == EMULATOR_TARGET and out is None:
        LOG.info(line)
    else:
        print(line, file=out or sys.stdout)


def write_if_changed(path: pathlib.Path, text: str) -> str:
    """Write ``text`` to ``path`` unless it holds it already, so that the file's time
    stamp, and with it ninja's verdict, stays put; returns the path as a string."""
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(path)


def emulator_headers() -> list[str]:
    """The text of every header of the emulator: part of each build's cache key, so that
    a changed header rebuilds what includes it."""
    return [p.read_text() for p in sorted(EMULATOR_DIR.rglob("*")) if p.is_file()]


def precompiled_header(header: pathlib.Path, includes, cflags,
                       verbose: bool = False) -> list[pathlib.Path]:
    """[the folder of ``<header>.gch``] for a build with ``cflags`` whose first line
    includes ``header``, built on first use; [] where it cannot be built.

    A header that includes ATen and pybind (the first line of every wrapper of
    attnbook's kernels) takes g++ more than half of a small kernel's build (4–5 s of 8
    on two cores). Put first on the include path, the folder's precompiled copy stands
    in for it (a few hundred MB, once per flag set). g++ takes it only where it was
    made with the same options (torch's, then ``cflags``) and skips it otherwise.

    Macros are the exception: a build may define one the header was made without (as
    long as the header does not read it; where it does, g++ skips the copy). So it is
    made without the emulator's own per-build macros (``-DATTNBOOK_…``: the
    architecture's, the checked build's marker), and builds for every architecture
    share one; a user's flags, ``-D`` or not, still make a copy of their own."""
    text = header.read_text()
    system = [*cpp_extension.include_paths(), sysconfig.get_path("include")]
    flags = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-I{EMULATOR_DIR}",
             *(f"-I{p}" for p in includes), *(f"-isystem{p}" for p in system),
             "-fPIC", *(f for f in cflags
                        if not f.startswith("-DATTNBOOK_") or f in CPU_FLAGS)]
    cxx = os.environ.get("CXX", "c++")
    name = f"pch_{header.stem}_" + cache_key(cxx, text, *flags, *emulator_headers(),
                                             torch.__version__)
    folder = build_directory(name, verbose)
    gch = folder / f"{header.name}.gch"
    with build_lock(name, verbose):
        if not gch.is_file() and not (folder / "failed").is_file():
            # made from a copy beside it, which a second #include then finds
            copy = write_if_changed(folder / header.name, text)
            made = subprocess.run([cxx, *flags, "-x", "c++-header", copy, "-o",
                                   str(folder / "partial.gch")],
                                  capture_output=True, text=True)
            if made.returncode:   # the builds go on without it, as slowly as before
                (folder / "failed").write_text(made.stderr)
            else:
                os.replace(folder / "partial.gch", gch)
    return [folder] if gch.is_file() else []


@contextlib.contextmanager
def building(name: str, full: str, target: str, errors, *, checked: bool = False,
             product: str | None = None, log=None, verbose: bool = False):
    """Around one build of ``name`` for ``target`` in the extension cache's folder
    ``full`` (yielded): the folder held by this process, a line of progress while
    ``product`` (``<full>.so`` by default) is not in it, then the finished line
    (:func:`report_build`, to ``log``). A failure of the compiler (a RuntimeError or
    ImportError) becomes a :class:`CompileError` whose message is ``errors(its
    log)``."""
    folder = build_directory(full, verbose)
    start = time.perf_counter()
    try:
        with quiet_build(verbose), build_lock(full, verbose), build_progress(
                name + (" (checked)" if checked else ""), target, folder,
                (folder / (product or f"{full}.so")).exists()) as progress:
            yield folder
    except CompileError:
        raise
    except (RuntimeError, ImportError) as e:
        raise CompileError(errors(str(e))) from None
    report_build(name, checked, target, time.perf_counter() - start, log, progress)


class Twin:
    """The checked build of a module, made on first use by ``make()``: the module
    (``twin()``) or, for an extension's operators, its library's path
    (``twin.library()``)."""

    def __init__(self, make):
        self.make, self.module = make, None

    def __call__(self):
        if self.module is None:
            self.module = self.make()
        return self.module

    def library(self) -> str:
        module = self()
        return module if isinstance(module, str) else module.__file__


class Build:
    """A build for the emulator: ``sources`` [(CUDA text, file name)], one translation
    unit each, whose ``#include "x"`` are pasted in from ``folders`` (searched in
    order); ``includes``: more folders for the host compiler's ``#include`` after the
    emulator's headers; ``arch``: what ``__CUDA_ARCH__`` says; ``cflags``: the host
    compiler's (a ``-std`` older than C++20 dropped); ``cuda_cflags``: nvcc's, of which
    ``--fmad=false`` is honoured; ``defines``: ``NAME`` or ``NAME=VALUE``.

    Each unit is ``head`` (text, or a function of the translated code and the file
    name), the translated file, ``wrapper`` (C++ that is not translated, its local
    headers pasted in, named ``wrapper`` in errors), then ``tail`` (text).
    ``edit(code, file name, checked)``, where given, changes each translated file.
    ``pch``: a header ``head`` includes first, to be precompiled
    (:func:`precompiled_header`)."""

    def __init__(self, name: str, sources, *, folders=(), includes=(),
                 arch: str = "sm_80", cflags=(), cuda_cflags=(), defines=(),
                 head="", wrapper: str = "", tail: str = "", edit=None,
                 pch: pathlib.Path | None = None, verbose: bool = False):
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise ValueError(f"a build's name must be ASCII letters, digits and _, "
                             f"got {name!r}")
        self.name, self.sources = name, [(str(t), str(n)) for t, n in sources]
        if len({n for _, n in self.sources}) < len(self.sources):
            raise ValueError("two sources have one file name")
        self.folders = [pathlib.Path(f) for f in folders]
        self.includes = [EMULATOR_DIR, *map(pathlib.Path, includes)]
        self.arch, self.defines = arch, [str(d) for d in defines]
        self.cflags = fmad_off(cuda_cflags) + emulator_cflags(cflags)
        arch_number(arch)   # checks its spelling
        self.head, self.wrapper, self.tail = head, wrapper, tail
        self.edit, self.pch = edit, pch
        self.verbose = verbose

    def units(self, checked: bool) -> list[tuple[str, str]]:
        """[(file name, the C++ compiled for it)]: the one translation of CUDA text to
        the emulator's C++."""
        units = []
        for text, file_name in self.sources:
            seen = set()   # a header pasted into the file is not pasted in its wrapper
            try:
                code = ptx.to_cpp(emulate.to_cpp(emulate.inline_headers(
                    text, file_name, self.folders, seen)))
            except SyntaxError as e:
                raise CompileError(f"{file_name}: {e}") from None
            if self.edit is not None:
                code = self.edit(code, file_name, checked)
            head = self.head(code, file_name) if callable(self.head) else self.head
            wrapper = self.wrapper and '#line 1 "wrapper"\n' + emulate.inline_headers(
                self.wrapper, "wrapper", self.folders, seen) + "\n"
            units.append((file_name, f'{head}#line 1 "{file_name}"\n{code}\n'
                                     f'{wrapper}{self.tail}'))
        return units

    def flags(self, checked: bool, program: bool = False) -> list[str]:
        """The host compiler's flags: the emulator's, the architecture, the user's,
        the checked build's."""
        own = [f for f in CPU_FLAGS if not (program and f == FRAME_LIMIT)]
        return [*own, f"-DATTNBOOK_EMU_ARCH={arch_number(self.arch)}",
                f"-DATTNBOOK_EMU_ARCH_FEATURES={int(self.arch.endswith('a'))}",
                *self.cflags,
                *(f"-D{d}" for d in self.defines), *(CHECKED_FLAGS if checked else ())]

    def full_name(self, units, flags, *more) -> str:
        """The build's folder in the extension cache: its name, whether checked, and
        one key of everything that makes the build (the units, the flags, the include
        folders, the emulator's headers and the precompiled one, torch's version)."""
        checked = CHECKED_FLAGS[0] in flags
        key = cache_key(*(t for unit in units for t in unit), *flags, *self.includes,
                        *emulator_headers(), self.pch.read_text() if self.pch else "",
                        torch.__version__, *more)
        return f"{self.name}_{'checked' if checked else 'emulator'}_{key}"

    def functions(self, functions, guard_memory: bool = True):
        """A module of the named ``functions`` of a single source and its
        ``wrapper``, each call guarded (:func:`emulate.guard_module`; its tensors
        between guard pages with ``guard_memory``), run checked inside
        :func:`~cuda_emulator.sanitize` and :func:`~cuda_emulator.profile` (there with
        guard pages always)."""
        functions = list(functions)
        twin = Twin(lambda: emulate.guard_module(
            self._functions(functions, checked=True), functions))
        return emulate.guard_module(self._functions(functions, checked=False),
                                    functions, twin, guard_memory)

    def _functions(self, functions, checked: bool):
        units = self.units(checked)
        flags = self.flags(checked)
        includes = [*(precompiled_header(self.pch, [self.pch.parent], flags,
                                         self.verbose) if self.pch else ()),
                    *self.includes]
        full = self.full_name(units, flags, *functions)
        with building(self.name, full, EMULATOR_TARGET,
                      lambda log: self.errors(log, functions), checked=checked,
                      verbose=self.verbose) as folder:
            return cpp_extension.load_inline(
                name=full, cpp_sources=[units[0][1]], functions=functions,
                extra_cflags=flags, extra_ldflags=list(LINK_FLAGS),
                extra_include_paths=[str(p) for p in includes], with_cuda=False,
                no_implicit_headers=True, verbose=self.verbose,
                build_directory=str(folder))

    def library(self, checked: bool, is_python_module: bool = True):
        """The sources as a torch extension: its module or, where
        ``is_python_module`` is false, its library's path (as torch's ``load``)."""
        units = self.units(checked)
        flags = self.flags(checked)
        full = self.full_name(units, flags, is_python_module)
        with building(self.name, full, EMULATOR_TARGET,
                      lambda log: self.errors(log, by_file=True), checked=checked,
                      verbose=self.verbose) as folder:
            return cpp_extension.load(
                name=full, sources=self._write(folder, units), extra_cflags=flags,
                extra_ldflags=list(LINK_FLAGS),
                extra_include_paths=[str(p) for p in self.includes],
                is_python_module=is_python_module, verbose=self.verbose,
                build_directory=str(folder))

    def executable(self, checked: bool, log=None) -> pathlib.Path:
        """The sources as a program (one of them defines ``main()``), linked with
        torch's include path and, checked, its c10 (the checked build reports torch's
        allocations through it). ``log``: where the build's line goes."""
        units = self.units(checked)
        flags = [*self.flags(checked, program=True), "-DATTNBOOK_PROGRAM",
                 *(["-DATTNBOOK_PROGRAM_CHECKS=11"] if checked else ()),
                 *(f"-I{p}" for p in (*self.includes,
                                      *cpp_extension.include_paths()))]
        libraries = ["-lpthread", "-ldl"]
        if checked:
            lib = cpp_extension.library_paths()[0]
            libraries = [f"-L{lib}", "-lc10", f"-Wl,-rpath,{lib}", *libraries]
        full = "program_" + self.full_name(units, flags, *libraries)
        with building(self.name, full, EMULATOR_TARGET,
                      lambda log: self.errors(log, by_file=True), checked=checked,
                      product=self.name, log=log, verbose=self.verbose) as folder:
            exe = folder / self.name
            if not exe.is_file():
                command = [os.environ.get("CXX", "c++"), *flags,
                           *self._write(folder, units), "-o", str(exe), *libraries]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode:
                    raise RuntimeError(done.stderr)
            return exe

    @staticmethod
    def _write(folder: pathlib.Path, units) -> list[str]:
        """Each unit in the build folder, as C++ (``a.cu`` as ``a.cu.cpp``)."""
        return [write_if_changed(folder / (name if name.endswith((".cpp", ".cc"))
                                           else f"{name}.cpp"), text)
                for name, text in units]

    def errors(self, log: str, functions=(), by_file: bool = False) -> str:
        """A failed build's message: the compiler's errors with the reader's line the
        first one names, in the file it names, which the message says failed where
        the build is of files (``by_file``: an extension's, a program's); else it
        names the build."""
        named = [(t, n) for t, n in self.sources
                 if re.search(re.escape(n) + r"[:(]\d+", log)]
        text, file_name = named[0] if named else (self.sources[0] if len(
            self.sources) == 1 else ("", ""))
        short = short_error(log, text, file_name)
        if functions:
            missing = missing_functions(log, short, self.sources[0][0], self.wrapper,
                                        functions)
            short = missing or short
        if "frame-larger-than" in short:
            short += (f"\na GPU thread has at most {MAX_LOCAL_BYTES // 1024} KiB of "
                      "local memory (ptxas: 'too much local data'): make the local "
                      "arrays smaller, or keep the data in global memory")
        where = (named[0] if named else self.sources[0])[1] if by_file else self.name
        return f"compiling {where} failed:\n{short}"

