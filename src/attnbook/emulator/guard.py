"""Guard pages around the tensors of a call of a reader's module on the emulator.

A kernel that writes a few kilobytes past the end of a tensor on the CPU overwrites the
neighbouring heap chunk, and the process dies later (a SIGBUS, ``free(): corrupted``),
far from the kernel. In the default mode, :func:`guarded_call` runs a function of a
module from :func:`attnbook.compile` or :func:`attnbook.load_extension` with

* every CPU tensor argument (and those in a list or tuple argument) copied into memory
  that ends on a page boundary, followed by 1 MiB and preceded by 64 KiB of unmapped
  address space (views of one storage share one copy, so aliasing is kept), and
* torch's CPU allocator replaced, while the call runs, by one that places every new
  tensor the same way (the outputs and workspaces the wrapper allocates),

so that an access a little past (or before) a tensor faults at once, and
:class:`~attnbook.emulator.KernelFault` names it: "a write at address 0x…
(SIGSEGV), 16000 bytes past the end of a 4000-byte tensor". After the call the copies
are written back into the arguments' storages, and a returned tensor that is a view of
a copy becomes the same view of the argument. Rounding keeps 16-byte alignment, so up to
15 bytes past an end go unnoticed, as within a GPU allocation's rounding.
``ab.sanitize()`` (memcheck) checks every access instead; the package's own, tested,
ops run without guards (their tensors can be large). The allocator is ``guard.cpp``, a
library of its own built on first use.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import pathlib
import threading

import torch

from .cache import LINK_FLAGS, build_lock, cpp_extension, quiet_build

__all__ = ["guarded_call"]

_lock = threading.Lock()
_depth = 0          # calls in progress, on any Python thread
SOURCE = pathlib.Path(__file__).with_name("guard.cpp")


@functools.lru_cache(maxsize=None)
def _allocator() -> ctypes.CDLL:
    """guard.cpp's library, built on first use (a few seconds, once per machine)."""
    text = SOURCE.read_text()
    key = hashlib.sha256(f"{text}\0{torch.__version__}".encode()).hexdigest()[:12]
    name = f"attnbook_guard_{key}"
    with quiet_build(), build_lock(name, False):
        path = cpp_extension.load(name=name, sources=[str(SOURCE)],
                                  extra_cflags=["-O2"],
                                  extra_ldflags=list(LINK_FLAGS),
                                  is_python_module=False)
    return ctypes.CDLL(path)


@functools.lru_cache(maxsize=None)
def _library(path: str):
    """The extension at ``path``, told where to ask what a faulting address was; None
    for a build that cannot be told (one without the emulator's runtime)."""
    lib = ctypes.CDLL(path)
    if not hasattr(lib, "attnbook_set_describe_address"):
        return None
    describe = ctypes.cast(_allocator().attnbook_guard_describe, ctypes.c_void_p)
    lib.attnbook_set_describe_address.argtypes = [ctypes.c_void_p]
    lib.attnbook_set_describe_address(describe)
    return lib


def _enter() -> None:
    global _depth
    with _lock:
        if _depth == 0:
            _allocator().attnbook_guard_install()
        _depth += 1


def _leave() -> None:
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0:
            _allocator().attnbook_guard_restore()


def _copy_bytes(dst, src) -> None:
    """One storage's bytes into another's, by one thread: torch's copy splits a few MB
    over its thread pool, whose start-up costs more than the copy on a busy machine."""
    ctypes.memmove(dst.data_ptr(), src.data_ptr(), src.nbytes())


class _Copies:
    """The guarded copy of each argument's storage, by the storage's address."""

    def __init__(self):
        self.pairs = {}   # storage address -> (its storage, the copy's)

    def swap(self, t):
        if isinstance(t, (list, tuple)):
            return type(t)(self.swap(x) for x in t)
        if (type(t) not in (torch.Tensor, torch.nn.Parameter) or t.device.type != "cpu"
                or t.layout != torch.strided or t.untyped_storage().nbytes() == 0):
            return t
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in self.pairs:
            copy = torch.empty(storage.nbytes(), dtype=torch.uint8)   # guarded
            _copy_bytes(copy.untyped_storage(), storage)
            self.pairs[key] = (storage, copy.untyped_storage())
        copy = self.pairs[key][1]
        return torch.empty(0, dtype=t.dtype).set_(copy, t.storage_offset(), t.size(),
                                                  t.stride())

    def write_back(self) -> None:
        for original, copy in self.pairs.values():
            _copy_bytes(original, copy)

    def unswap(self, result):
        """``result`` with each view of a copy made a view of its original."""
        if isinstance(result, (list, tuple)):
            return type(result)(self.unswap(x) for x in result)
        if (isinstance(result, torch.Tensor) and result.device.type == "cpu"
                and result.layout == torch.strided):
            for original, copy in self.pairs.values():
                if result.untyped_storage().data_ptr() == copy.data_ptr():
                    return torch.empty(0, dtype=result.dtype).set_(
                        original, result.storage_offset(), result.size(),
                        result.stride())
        return result


def guarded_call(fn, path: str, args, kwargs):
    """``fn(*args, **kwargs)`` with the call's tensors guarded (see the module's text);
    a plain call where the library at ``path`` has no guards (a build without
    them)."""
    if _library(path) is None:
        return fn(*args, **kwargs)
    copies = _Copies()
    _enter()
    try:
        with torch.no_grad():
            args = copies.swap(tuple(args))
            kwargs = {name: copies.swap(v) for name, v in kwargs.items()}
        result = fn(*args, **kwargs)
    finally:
        _leave()
    copies.write_back()
    return copies.unswap(result)
