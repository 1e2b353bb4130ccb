"""The operators a loaded extension registers with ``TORCH_LIBRARY``, on the emulator.

torch's dispatcher calls an operator's kernel itself, so the guards and checks that
wrap a module's functions (:func:`cuda_emulator.emulate.guard_module`) would never
see a call of ``torch.ops.ns.op``. On the emulator each build therefore registers the
extension's namespaces under names of its own (``ns`` becomes
``ns__attnbook_emulator_<tag>``, and ``ns__attnbook_checked_<tag>`` in the checked
build; the tag names the files and flags), and :func:`guard_operators` defines
``ns::op``, with the operator's schema, by a Python kernel that calls the default
build's operator with the call's tensors guarded or, inside
:func:`cuda_emulator.sanitize` and :func:`cuda_emulator.profile`, the checked build's.
A ``TORCH_LIBRARY_IMPL(ns, CUDA, m)`` block registers its kernels for the CPU, which
stands in for the GPU. Loaded again after an edit (a notebook cell run twice),
``ns::op`` calls the new build.
"""
from __future__ import annotations

import re

import torch

from . import emulate

__all__ = ["namespaces", "renamed", "guard_operators"]

_LIBRARY = re.compile(r"\bTORCH_LIBRARY(?:_FRAGMENT)?\s*\(\s*([A-Za-z_]\w*)")
_IMPL = re.compile(r"\bTORCH_LIBRARY_IMPL\s*\(\s*([A-Za-z_]\w*)\s*,\s*(\w+)")
_libraries: dict[str, torch.library.Library] = {}   # namespace -> its definitions
_kernels: dict[str, list] = {}   # "ns::op.overload" -> [the latest build's call]


def build_namespace(ns: str, build: str, tag: str) -> str:
    """Where build ("emulator" or "checked") ``tag`` registers namespace ``ns``."""
    return f"{ns}__attnbook_{build}_{tag}"


def namespaces(code: str) -> set[str]:
    """The namespaces ``code``'s TORCH_LIBRARY blocks name."""
    masked = emulate.blank_out(code, strings=True)
    return {m[1] for pattern in (_LIBRARY, _IMPL) for m in pattern.finditer(masked)}


def renamed(code: str, build: str, tag: str) -> str:
    """``code`` with each TORCH_LIBRARY block's namespace the build's, and the CUDA
    kernels of a TORCH_LIBRARY_IMPL block the CPU's."""
    masked = emulate.blank_out(code, strings=True)
    edits = [(m.start(1), m.end(1), build_namespace(m[1], build, tag))
             for pattern in (_LIBRARY, _IMPL) for m in pattern.finditer(masked)]
    edits += [(m.start(2), m.end(2), "CPU") for m in _IMPL.finditer(masked)
              if m[2] == "CUDA"]
    for start, end, new in sorted(edits, reverse=True):
        code = code[:start] + new + code[end:]
    return code


def guard_operators(path: str, spaces, tag: str, twin_library) -> None:
    """Define each operator of namespaces ``spaces`` that the default build at
    ``path`` registered (build tag ``tag``) as ``ns::op``, calling it guarded, and,
    inside sanitize() and profile(), the checked build's (``twin_library()`` builds and
    loads it, returning its path)."""
    names = torch._C._dispatch_get_all_op_names()
    for ns in spaces:
        prefix = build_namespace(ns, "emulator", tag) + "::"
        for full in names:
            if full.startswith(prefix):
                _define(ns, full[len(prefix):], path, tag, twin_library)


def _operator(space: str, name: str):
    op, _, overload = name.partition(".")
    return getattr(getattr(getattr(torch.ops, space), op), overload or "default")


def _define(ns: str, name: str, path: str, tag: str, twin_library) -> None:
    """ns::name (``op`` or ``op.overload``), calling build ``tag``'s operator."""
    op = _operator(build_namespace(ns, "emulator", tag), name)
    made = []   # the checked build's (plain call, library), once built

    def checked():
        if not made:
            library = twin_library()
            made.append((emulate.guard_function(
                _operator(build_namespace(ns, "checked", tag), name), library, None,
                False).plain, library))
        return made[0]
    call = emulate.guard_function(op, path, checked, True)
    qualified = f"{ns}::{name}"
    if qualified not in _kernels:
        if ns not in _libraries:
            _libraries[ns] = torch.library.Library(ns, "DEF")
        _libraries[ns].define(str(op._schema).split("::", 1)[1])
        latest = _kernels[qualified] = [call]
        _libraries[ns].impl(name, lambda *args, **kwargs: latest[0](*args, **kwargs),
                            "CompositeExplicitAutograd")
    _kernels[qualified][0] = call
