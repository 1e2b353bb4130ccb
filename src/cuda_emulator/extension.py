"""A whole torch extension, loaded unmodified on the CPU:
``load_extension(path_or_text)`` for one file, ``load_extension(name=...,
sources=[...])`` for several, as ``torch.utils.cpp_extension.load`` takes them.

Many kernels online come as one ``.cu`` file: kernels, ``#include <torch/extension.h>``,
a forward function that checks its inputs are on the GPU and allocates its outputs there
(``.to(torch::kCUDA)``, ``options().device(torch::kCUDA)``, ``at::cuda::
getCurrentCUDAStream()``), and a ``PYBIND11_MODULE`` that exposes it; others split the
binding (``main.cpp``) from the kernels (``kernel.cu``). :func:`load_extension` compiles
the same text as C++, one translation unit per file, with the emulator's source
transforms (:class:`~cuda_emulator.build.Build`), the CPU standing in for the GPU: a
request for a CUDA device or tensor names the CPU (``kCUDA`` → ``kCPU``, ``.cuda()`` →
``.cpu()``, ``.is_cuda()`` → ``.is_cpu()``), and c10/ATen's CUDA headers are small
stand-ins (one stream, no-op device guards). Inside :func:`cuda_emulator.sanitize` or
:func:`cuda_emulator.profile` the module's functions run a checked build of the same
files, made on first use; its ``py::class_`` and ``py::enum_`` registrations are made
``py::module_local()``, so that its classes live beside the default build's, and an
object made there is of the checked build's class (see
:func:`cuda_emulator.emulate.guard_module`).
"""
from __future__ import annotations

import os
import pathlib
import re

from . import emulate, operators
from .build import Build, CompileError, Twin
from .cache import cache_key

__all__ = ["load_extension", "extension_files"]

# CUDA device requests that name the CPU on the emulator: (pattern, replacement).
_TO_CPU = [(re.compile(r"\bkCUDA\b"), "kCPU"),
           (re.compile(r"\.cuda\(\s*\)"), ".cpu()"),
           (re.compile(r"\.is_cuda\(\s*\)"), ".is_cpu()")]
_TORCH_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:torch|ATen|c10)/', re.M)
_BOUND_CLASS = re.compile(r"\b(?:py|pybind11)\s*::\s*(?:class_|enum_)\s*<")


def _to_cpu(code: str) -> str:
    masked = emulate.blank_out(code, strings=True)
    edits = sorted((m.start(), m.end(), new) for pattern, new in _TO_CPU
                   for m in pattern.finditer(masked))
    for start, end, new in reversed(edits):
        code = code[:start] + new + code[end:]
    return code


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


def extension_files(path_or_text=None, name: str | None = None, *, sources=None,
                    include_dirs=(), is_python_module: bool = True):
    """(name, [(text, file name)], folders for ``#include "x"``) of an extension
    given as :func:`load_extension` takes it, checked."""
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
                           "alone)")
    folders = [*dict.fromkeys(path.parent for _, path in files if path),
               *map(pathlib.Path, include_dirs), pathlib.Path.cwd()]
    named = [(text, path.name if path else f"{name}.cu") for text, path in files]
    if len({n for _, n in named}) < len(named):
        raise ValueError("two sources have one file name")
    return name, named, folders


def load_extension(path_or_text=None, name: str | None = None, *, sources=None,
                   extra_cflags=(), extra_cuda_cflags=(), extra_include_paths=(),
                   is_python_module: bool = True, arch: str | None = None,
                   include_dirs=(), verbose: bool = False):
    """Load a torch extension with its own ``PYBIND11_MODULE`` on the emulator and
    return the module: one CUDA file (``path_or_text``: a path, or its text), or
    ``sources``, the paths of its ``.cpp`` and ``.cu`` files, with ``extra_cflags``
    (the host compiler's, for every file), ``extra_cuda_cflags`` (nvcc's:
    ``--fmad=false`` is honoured) and ``extra_include_paths``, as
    ``torch.utils.cpp_extension.load`` takes them. ``load_extension("name",
    sources=[...])`` names it as torch's ``load`` does. Operators its
    ``TORCH_LIBRARY`` blocks register are ``torch.ops.<namespace>.<op>``; with
    ``is_python_module=False`` (such an extension may have no ``PYBIND11_MODULE``)
    the library's path is returned, as torch's ``load`` does. ``arch``: what
    ``__CUDA_ARCH__`` says (sm_80 by default). ``#include "x"`` looks beside each
    file, in ``include_dirs`` and ``extra_include_paths``, then in the working
    directory."""
    name, files, folders = extension_files(
        path_or_text, name, sources=sources,
        include_dirs=(*include_dirs, *extra_include_paths),
        is_python_module=is_python_module)
    # its operators' namespaces in the emulator's builds: by files and flags
    tag = cache_key(*(t for pair in files for t in pair), *extra_cflags,
                    *extra_cuda_cflags)
    namespaces = set()   # of its TORCH_LIBRARY blocks

    def edit(code, file_name, checked):
        code = _to_cpu(code)
        if checked:   # beside the default build in one process
            code = _module_local(code)
        namespaces.update(operators.namespaces(code))
        return operators.renamed(code, "checked" if checked else "emulator", tag)

    def head(code, file_name):
        """For a .cu file, torch's headers, where it uses them, before the emulator's
        (which stand in for CUDA's): a kernel file without them is spared their
        ~20 s of compiling."""
        if not file_name.endswith(".cu"):
            return ""
        return ("#include <torch/extension.h>\n" if _TORCH_INCLUDE.search(code)
                else "") + '#include "cuda_emulator.h"\n'

    build = Build(name, files, folders=folders, includes=folders, arch=arch or "sm_80",
                  cflags=extra_cflags, cuda_cflags=extra_cuda_cflags, head=head,
                  edit=edit, verbose=verbose)
    module = build.library(checked=False, is_python_module=is_python_module)

    def checked():
        module = build.library(checked=True, is_python_module=is_python_module)
        if isinstance(module, str):
            return module
        return emulate.guard_module(module, _public(module))

    twin = Twin(checked)
    operators.guard_operators(module if isinstance(module, str) else module.__file__,
                              namespaces, tag, twin.library)
    if not is_python_module:
        return module
    return emulate.guard_module(module, _public(module), twin)


def _public(module) -> list[str]:
    return [n for n in dir(module) if not n.startswith("_")]
