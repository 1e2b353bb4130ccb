"""Guard pages around the tensors of a call of a reader's module on the emulator.

A kernel that writes a few kilobytes past the end of a tensor on the CPU overwrites the
neighbouring heap chunk, and the process dies later (a SIGBUS, ``free(): corrupted``),
far from the kernel. In the default mode, :func:`guarded_call` runs a function of a
module from :class:`~cuda_emulator.build.Build` with

* every CPU tensor argument (and those in a list or tuple argument) copied into memory
  that ends on a page boundary, followed by 1 MiB and preceded by 64 KiB of unmapped
  address space (views of one storage share one copy, so aliasing is kept), and
* torch's CPU allocator replaced, while the call runs, by one that places every new
  tensor the same way (the outputs and workspaces the wrapper allocates),

so that an access a little past (or before) a tensor faults at once, and
:class:`~cuda_emulator.KernelFault` names it: "a write at address 0x…
(SIGSEGV), 16000 bytes past the end of a 4000-byte tensor". The bytes between the
guard and the tensor (under a page before it, under 16 after it: its end is kept
16-byte aligned) hold a known pattern; a write there does not fault, so after the call
the pattern is checked, and a changed byte is a KernelFault naming it the same way ("4
bytes before the start of a 4000-byte tensor"), without the kernel's line, which
``ab.sanitize()`` (memcheck, checking every access) gives. A read there goes unnoticed,
as on a GPU, where it reads a neighbouring allocation.

After the call, whether it returned or raised (a GPU keeps what a kernel wrote when the
wrapper fails after it), the copies are written back into the arguments' storages; a
returned argument is the argument itself, and a returned view of a copy becomes the same
view of the argument. Tensor subclasses are guarded as their tensor. The package's own,
tested, ops run without guards (their tensors can be large). The allocator is
``guard.cpp``, a library of its own built on first use.
"""
from __future__ import annotations

import ctypes
import functools
import pathlib
import threading

import torch

from .cache import LINK_FLAGS, build_lock, cache_key, cpp_extension, quiet_build

__all__ = ["guarded_call", "GuardFault"]

_lock = threading.Lock()
_depth = 0          # calls in progress, on any Python thread
SOURCE = pathlib.Path(__file__).with_name("guard.cpp")


@functools.lru_cache(maxsize=None)
def _allocator() -> ctypes.CDLL:
    """guard.cpp's library, built on first use (a few seconds, once per machine)."""
    text = SOURCE.read_text()
    name = "guard_" + cache_key(text, torch.__version__)
    with quiet_build(), build_lock(name, False):
        path = cpp_extension.load(name=name, sources=[str(SOURCE)],
                                  extra_cflags=["-O2"],
                                  extra_ldflags=list(LINK_FLAGS),
                                  is_python_module=False)
    lib = ctypes.CDLL(path)
    lib.attnbook_guard_mark.restype = ctypes.c_uint64
    return lib


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


class GuardFault(RuntimeError):
    """A call changed the bytes beside a guarded tensor (emulate.py makes it a
    KernelFault)."""


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
        self.swapped = {}   # id(a swapped argument) -> (it, the argument)

    def swap(self, t):
        if isinstance(t, (list, tuple)):
            return type(t)(self.swap(x) for x in t)
        if not isinstance(t, torch.Tensor):
            return t
        with torch._C.DisableTorchFunctionSubclass():   # a subclass as its tensor
            try:
                if (t.device.type != "cpu" or t.layout != torch.strided
                        or t.untyped_storage().nbytes() == 0):
                    return t
                storage = t.untyped_storage()
            except (RuntimeError, NotImplementedError):   # a wrapper without storage
                return t
            view = self._view_of_copy(t, storage)
        self.swapped[id(view)] = (view, t)
        return view

    def _view_of_copy(self, t, storage):
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
        """``result`` with each swapped argument made the argument again and each
        other view of a copy a view of its original."""
        if isinstance(result, (list, tuple)):
            return type(result)(self.unswap(x) for x in result)
        if id(result) in self.swapped and self.swapped[id(result)][0] is result:
            return self.swapped[id(result)][1]
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
    allocator = _allocator()
    since = allocator.attnbook_guard_mark()
    _enter()
    try:
        with torch.no_grad():
            args = copies.swap(tuple(args))
            kwargs = {name: copies.swap(v) for name, v in kwargs.items()}
        result = fn(*args, **kwargs)
    finally:
        _leave()
        copies.write_back()
    found = ctypes.create_string_buffer(200)
    allocator.attnbook_guard_check(ctypes.c_uint64(since), found, len(found))
    if found.value:
        raise GuardFault(f"a kernel wrote{found.value.decode()[1:]} (the bytes there "
                         "changed during the call); ab.sanitize() names the line")
    return copies.unswap(result)
