"""A whole torch extension, loaded unmodified: ``load_extension(path_or_text)`` for one
file, ``load_extension(name=..., sources=[...])`` for several, as
``torch.utils.cpp_extension.load`` takes them. On a GPU the files compile as they are
(``torch.utils.cpp_extension.load``); without one,
:func:`cuda_emulator.load_extension` compiles the same text for the CPU (see there what
it changes: a request for a CUDA device names the CPU, CUDA's headers are stand-ins,
and inside :func:`attnbook.sanitize` or :func:`attnbook.profile` a checked build runs).
"""
from __future__ import annotations

import re

import torch

import cuda_emulator
from cuda_emulator.build import building, short_error, write_if_changed
from cuda_emulator.cache import LINK_FLAGS, build_directory, cache_key, cpp_extension
from cuda_emulator.emulate import set_env
from cuda_emulator.extension import extension_files
from .compile import BACKENDS, arch_list, default_backend, device_arch

__all__ = ["load_extension"]


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
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if arch is not None and not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise ValueError(f"arch must look like 'sm_80', got {arch!r}")
    options = dict(sources=sources, extra_include_paths=extra_include_paths,
                   is_python_module=is_python_module, include_dirs=include_dirs)
    if backend == "emulator":
        return cuda_emulator.load_extension(
            path_or_text, name, extra_cflags=extra_cflags,
            extra_cuda_cflags=extra_cuda_cflags, arch=arch, verbose=verbose,
            **options)
    name, files, folders = extension_files(
        path_or_text, name, sources=sources, is_python_module=is_python_module,
        include_dirs=(*include_dirs, *extra_include_paths))
    return _nvcc(name, files, folders, list(extra_cflags), list(extra_cuda_cflags),
                 arch or device_arch(), is_python_module, verbose)


def _nvcc(name, files, folders, cflags, cuda_cflags, arch, is_python_module, verbose):
    """The files, as they are, compiled by nvcc for ``arch`` and loaded."""
    full = f"{name}_cuda_" + cache_key(*(t for pair in files for t in pair), arch,
                                       *cflags, *cuda_cflags, torch.__version__,
                                       *folders)
    folder = build_directory(full, verbose)
    paths = [write_if_changed(folder / file_name, text) for text, file_name in files]

    def errors(log):
        named = [(t, n) for t, n in files if re.search(re.escape(n) + r"[:(]\d+", log)]
        return f"compiling {name} failed:\n" + short_error(log, *(named[0] if named
                                                                  else ()))

    with set_env("TORCH_CUDA_ARCH_LIST", arch_list(arch)), building(
            name, full, arch, errors, verbose=verbose):
        return cpp_extension.load(
            name=full, sources=paths, extra_cflags=["-O2", *cflags],
            extra_cuda_cflags=["-O3", *cuda_cflags], extra_ldflags=list(LINK_FLAGS),
            extra_include_paths=[str(p) for p in folders],
            is_python_module=is_python_module, verbose=verbose)
