"""A whole torch extension, loaded unmodified: ``load_extension(path_or_text)`` for one
file, ``load_extension(name=..., sources=[...])`` for several, as
``torch.utils.cpp_extension.load`` takes them.

Many kernels online come as one ``.cu`` file: kernels, ``#include <torch/extension.h>``,
a forward function that checks its inputs are on the GPU and allocates its outputs there
(``.to(torch::kCUDA)``, ``options().device(torch::kCUDA)``, ``at::cuda::
getCurrentCUDAStream()``), and a ``PYBIND11_MODULE`` that exposes it; others split the
binding (``main.cpp``) from the kernels (``kernel.cu``). On a GPU
:func:`load_extension` compiles the files as they are (``torch.utils.cpp_extension.
load``). On the emulator it compiles the same text as C++, one translation unit per
file, with the emulator's source transforms, the CPU standing in for the GPU: a request
for a CUDA device or tensor names the CPU (``kCUDA`` → ``kCPU``, ``.cuda()`` →
``.cpu()``, ``.is_cuda()`` → ``.is_cpu()``), and c10/ATen's CUDA headers are small
stand-ins (one stream, no-op device guards). As for :func:`attnbook.compile`, inside
:func:`attnbook.sanitize` or :func:`attnbook.profile` the module's functions run a
checked build of the same files, made on first use; its ``py::class_`` and
``py::enum_`` registrations are made ``py::module_local()``, so that its classes live
beside the default build's, and an object made there is of the checked build's class
(see :func:`attnbook.emulator.emulate.guard_module`).
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import re
import time

import torch

from ..emulator import emulate, ptx
from ..emulator.cache import LINK_FLAGS
from . import operators
from .compile import (BACKENDS, CHECKED_FLAGS, CPU_FLAGS, EMULATOR_DIR,
                      EMULATOR_TARGET, INCLUDE_DIR, CompileError, arch_list,
                      arch_number, build_lock, device_arch, fmad_off, short_error,
                      build_directory, cpp_extension, default_backend,
                      emulator_cflags, emulator_headers, quiet_build, report_build,
                      write_if_changed)
from .progress import build_progress

__all__ = ["load_extension"]

# CUDA device requests that name the CPU on the emulator: (pattern, replacement).
_TO_CPU = [(re.compile(r"\bkCUDA\b"), "kCPU"),
           (re.compile(r"\.cuda\(\s*\)"), ".cpu()"),
           (re.compile(r"\.is_cuda\(\s*\)"), ".is_cpu()")]


def _to_cpu(code: str) -> str:
    masked = emulate.blank_out(code, strings=True)
    edits = sorted((m.start(), m.end(), new) for pattern, new in _TO_CPU
                   for m in pattern.finditer(masked))
    for start, end, new in reversed(edits):
        code = code[:start] + new + code[end:]
    return code


_BOUND_CLASS = re.compile(r"\b(?:py|pybind11)\s*::\s*(?:class_|enum_)\s*<")


def _module_local(code: str) -> str:
    """Each ``py::class_`` and ``py::enum_`` registered ``py::module_local()``, so
    that the checked build's classes are its own beside the default build's of the
    same C++ types (pybind11 refuses a second global registration of a type)."""
    masked = emulate.blank_out(code, strings=True)
    ends = []
    for m in _BOUND_CLASS.finditer(masked):
        i, depth = m.end(), 1
        while i < len(masked) and depth:   # past the template arguments
            depth += {"<": 1, ">": -1}.get(masked[i], 0)
            i += 1
        while i < len(masked) and masked[i].isspace():
            i += 1
        if masked[i:i + 1] != "(":
            continue   # a type, not a registration
        depth, commas = 0, 0
        for i in range(i + 1, len(masked)):   # to the end of the name argument
            c = masked[i]
            if c in ")]}" and depth == 0 or c == "," and depth == 0 and commas:
                break
            depth += (c in "([{") - (c in ")]}")
            commas += c == "," and depth == 0
        ends.append(i)
    for i in reversed(ends):
        code = code[:i] + ", pybind11::module_local()" + code[i:]
    return code


def _source(path_or_text) -> tuple[str, pathlib.Path | None]:
    """(text, path) of a file given by its path, or (text, None) of text itself: one
    line naming a file (``kernels/attn.cu``, ``common.cuh``) is a path."""
    if isinstance(path_or_text, os.PathLike) or re.fullmatch(
            r"[^\s{};()]+\.\w+", path_or_text.strip()):
        path = pathlib.Path(path_or_text)
        if not path.is_file():
            raise FileNotFoundError(f"no extension file {str(path)!r}")
        return path.read_text(), path.resolve()
    return path_or_text, None


def load_extension(path_or_text=None, name: str | None = None, *, sources=None,
                   extra_cflags=(), extra_cuda_cflags=(), extra_include_paths=(),
                   is_python_module: bool = True, backend: str | None = None,
                   arch: str | None = None, include_dirs=(), verbose: bool = False):
    """Load a torch extension with its own ``PYBIND11_MODULE`` and return the module:
    one CUDA file (``path_or_text``: a path, or its text), or ``sources``, the paths
    of its ``.cpp`` and ``.cu`` files, with ``extra_cflags`` (the C++ compiler's; on
    the emulator, every file's), ``extra_cuda_cflags`` (nvcc's) and
    ``extra_include_paths``, as ``torch.utils.cpp_extension.load`` takes them.
    ``load_extension("name", sources=[...])`` names it as torch's ``load`` does.
    Operators its ``TORCH_LIBRARY`` blocks register are ``torch.ops.<namespace>.<op>``;
    with ``is_python_module=False`` (such an extension may have no
    ``PYBIND11_MODULE``) the library's path is returned, as torch's ``load`` does.
    ``backend``: "cuda", "emulator" or None for this machine's; ``arch`` as for
    :func:`attnbook.compile`. ``#include "x"`` looks beside each file, in
    ``include_dirs`` and ``extra_include_paths``, then in the working directory."""
    if sources is not None and name is None and isinstance(path_or_text, str) and \
            re.fullmatch(r"[A-Za-z_]\w*", path_or_text):
        name, path_or_text = path_or_text, None   # torch's load("name", sources=[...])
    if (path_or_text is None) == (sources is None):
        raise TypeError("give one extension file (path_or_text) or sources=[...]")
    if sources is not None:   # one path, as torch's load takes it, or any iterable
        sources = [sources] if isinstance(sources, (str, os.PathLike)) else \
            list(sources)
        if not sources:
            raise TypeError("sources must name at least one file, got none")
    files = [_source(path_or_text)] if sources is None else \
        [_source(pathlib.Path(f)) for f in sources]
    name = name or (files[0][1].stem if files[0][1] else "extension")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name, re.ASCII):
        raise ValueError(f"extension name must be an ASCII identifier, got {name!r}")
    if is_python_module and not any("PYBIND11_MODULE" in text for text, _ in files):
        raise CompileError(f"{name}: no file defines a PYBIND11_MODULE (give "
                           "is_python_module=False for one of TORCH_LIBRARY operators "
                           "alone); use attnbook.compile for kernel text with a "
                           "separate wrapper")
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if arch is not None and not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise ValueError(f"arch must look like 'sm_80', got {arch!r}")
    folders = [*dict.fromkeys(path.parent for _, path in files if path),
               *map(pathlib.Path, (*include_dirs, *extra_include_paths)),
               pathlib.Path.cwd()]
    named = [(text, path.name if path else f"{name}.cu") for text, path in files]
    if len({n for _, n in named}) < len(named):
        raise ValueError("two sources have one file name")
    build = Build(name, named, folders, list(extra_cflags), list(extra_cuda_cflags),
                  is_python_module, verbose)
    if backend == "emulator":
        module = build.emulated(arch or "sm_80", checked=False)
        twin = _Twin(build, arch or "sm_80")
        operators.guard_operators(_library_file(module), build.namespaces, build.tag,
                                  twin.library)
        if not is_python_module:
            return module
        public = [n for n in dir(module) if not n.startswith("_")]
        return emulate.guard_module(module, public, twin)
    return build.cuda(arch or device_arch())


def _library_file(module) -> str:
    return module if isinstance(module, str) else module.__file__


_TORCH_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:torch|ATen|c10)/', re.M)


def _key(*parts) -> str:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:12]


class _Twin:
    """The checked build of an emulated extension, made on first use: its module
    (``twin()``) or, for its operators, its library's path (``twin.library()``)."""

    def __init__(self, build, arch):
        self.build, self.arch, self.module = build, arch, None

    def __call__(self):
        if self.module is None:
            module = self.build.emulated(self.arch, checked=True)
            if not isinstance(module, str):
                public = [n for n in dir(module) if not n.startswith("_")]
                module = emulate.guard_module(module, public)
            self.module = module
        return self.module

    def library(self) -> str:
        return _library_file(self())


class Build:
    """One extension's files (text, file name), where its includes are found, its
    flags."""

    def __init__(self, name, files, folders, cflags, cuda_cflags, is_python_module,
                 verbose):
        self.name, self.files, self.folders = name, files, folders
        self.cflags, self.cuda_cflags, self.verbose = cflags, cuda_cflags, verbose
        self.is_python_module = is_python_module
        self.namespaces = set()   # of its TORCH_LIBRARY blocks, once built
        # its operators' namespaces in the emulator's builds: by files and flags
        self.tag = _key(*(t for pair in files for t in pair), *cflags, *cuda_cflags)

    def emulated(self, arch, checked):
        """Each file as C++ for the emulator, in the build folder (a .cu file as
        ``name.cu.cpp``), compiled and loaded."""
        texts = []
        for text, file_name in self.files:
            try:
                code = ptx.to_cpp(emulate.to_cpp(_to_cpu(
                    emulate.inline_headers(text, file_name, self.folders))))
            except SyntaxError as e:
                raise CompileError(f"{file_name}: {e}") from None
            if checked:   # beside the default build in one process
                code = _module_local(code)
            self.namespaces |= operators.namespaces(code)
            code = operators.renamed(code, "checked" if checked else "emulator",
                                     self.tag)
            first = ""
            if file_name.endswith(".cu"):   # torch's headers, where the file uses
                # them, before the emulator's (which stand in for CUDA's); a kernel
                # file without them is spared their ~20 s of compiling
                first = ("#include <torch/extension.h>\n" if _TORCH_INCLUDE.search(code)
                         else "") + '#include "cuda_emulator.h"\n'
            texts.append((first + f'#line 1 "{file_name}"\n{code}\n', file_name))
        cflags = CPU_FLAGS + [f"-DATTNBOOK_EMU_ARCH={arch_number(arch)}",
                              *fmad_off(self.cuda_cflags),
                              *emulator_cflags(self.cflags),
                              *(CHECKED_FLAGS if checked else ())]
        full = f"{self.name}_{'checked' if checked else 'emulator'}_" + _key(
            *(t for pair in texts for t in pair), *cflags, torch.__version__,
            *emulator_headers(), *self.folders)
        folder = build_directory(full, self.verbose)
        # a .cu file as name.cu.cpp: C++ for the host compiler
        paths = [write_if_changed(folder / f"{name}.cpp" if name.endswith(".cu")
                                  else folder / name, text) for text, name in texts]
        includes = [EMULATOR_DIR, INCLUDE_DIR, *self.folders]
        return self._load(full, paths, cflags, [], includes, EMULATOR_TARGET)

    def cuda(self, arch):
        full = f"{self.name}_cuda_" + _key(*(t for pair in self.files for t in pair),
                                            arch, *self.cflags, *self.cuda_cflags,
                                            torch.__version__, *self.folders)
        folder = build_directory(full, self.verbose)
        paths = [write_if_changed(folder / name, text) for text, name in self.files]
        with emulate.set_env("TORCH_CUDA_ARCH_LIST", arch_list(arch)):
            return self._load(full, paths, ["-O2", *self.cflags],
                              ["-O3", *self.cuda_cflags], self.folders, arch)

    def _load(self, full, paths, cflags, cuda_cflags, includes, target):
        start = time.perf_counter()
        checked = "_checked_" in full
        folder = build_directory(full, self.verbose)
        try:
            with quiet_build(self.verbose), build_lock(full, self.verbose), \
                    build_progress(self.name + (" (checked)" if checked else ""),
                                   target, folder,
                                   (folder / f"{full}.so").exists()) as progress:
                module = cpp_extension.load(
                    name=full, sources=paths, extra_cflags=cflags,
                    extra_cuda_cflags=cuda_cflags or None,
                    extra_ldflags=list(LINK_FLAGS),
                    extra_include_paths=[str(p) for p in includes],
                    is_python_module=self.is_python_module, verbose=self.verbose)
        except (RuntimeError, ImportError) as e:
            raise CompileError(f"compiling {self.name} failed:\n"
                               f"{self._errors(str(e))}") from None
        report_build(self.name, checked, target, time.perf_counter() - start,
                     progress=progress)
        return module

    def _errors(self, log):
        """The compiler's errors, with the reader's line the first one names."""
        for text, file_name in self.files:
            if re.search(re.escape(file_name) + r"[:(]\d+", log):
                return short_error(log, text, file_name)
        return short_error(log)
