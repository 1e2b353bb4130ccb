"""Running CUDA kernel source on the CPU.

The kernel text is compiled by the host C++ compiler against
``include/cuda_emulator.h``, which provides CUDA's built-ins and runs each block's
threads as cooperative fibers. Two pieces of CUDA syntax are not C++; :func:`to_cpp`
rewrites them without moving any line:

* ``kernel<<<grid, block, smem, stream>>>(args)`` becomes a call of the emulator's
  launcher;
* ``extern __shared__ T name[];`` becomes a pointer to the emulator's dynamic shared
  memory, and every static ``__shared__`` declaration inside a function is followed by a
  reference to the (renamed) variable and a call that fills it with NaN once per block.

A host variable named like a built-in (``dim3 gridDim(…)``) is renamed in its scope,
the built-ins being macros. Inline PTX is rewritten by :mod:`.ptx`.

Kernels shared between files live in headers; :func:`inline_headers` pastes the ones
found in the reader's folders, whatever their extension, into the source first (with
``#line`` markers, so errors still name the header's own lines), so that their launches
and shared memory are rewritten too.

:func:`thread_order` chooses the order in which the threads of a block run between two
barriers (also settable with the environment variable ``ATTNBOOK_THREAD_ORDER``).
:func:`workers` chooses how many OS threads run blocks at once (every core by default;
also settable with ``ATTNBOOK_EMU_WORKERS``). A block's thread order depends only on the
order, its seed and the block's index, so results do not depend on the number of
workers, except where blocks race each other (through atomics or global memory) or
print.

A launch that hangs, one in which no thread has passed a barrier or finished for 60
seconds (``ATTNBOOK_EMU_STALL``), raises :class:`KernelTimeout`; a long launch that
progresses runs to its end. A launch that runs past a time budget set for the whole
launch (:func:`time_budget`, ``ATTNBOOK_EMU_TIMEOUT`` seconds; 0 for no limit at all,
the stall guard included) raises it too, and one interrupted by SIGINT (Jupyter's
interrupt button, Ctrl-C) raises :class:`KernelInterrupted`; each names the kernel
and the threads that had not finished, and the next launch works. A
watchdog thread stops the stuck threads without their help: an endless loop or a spin
on a flag that never changes is caught, as long as the thread is in kernel code (x86-64
Linux only; a thread inside a library call, ``printf``, is caught once it is back: a
loop spending nearly all its time in ``printf`` to a file may take many seconds).
An empty loop on a value that cannot change (``while (flag == 0) {}`` on a plain,
non-``volatile`` variable) is removed by the C++ compiler, which may assume loops end.

A thread that faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL: an access to unmapped memory,
dynamic shared memory past the bytes the launch gave, a stack overflow, an integer
division by zero) raises :class:`KernelFault` with the kernel, block, thread, address
and ``file:line``, and the next launch works (x86-64 Linux). A thread's stack is
``cudaLimitStackSize`` (512 KiB unless host code sets less with ``cudaDeviceSetLimit``)
and 64 KiB for the emulator's own frames. While a kernel runs, the
GIL is released, so Python's other threads run (a timer's SIGINT, Jupyter's output).

Python threads may call kernels at once, of one extension or of several. An
extension's launches take turns (each uses every worker; as on one CUDA stream); each
call gets its own results and its own errors.

Inside :func:`cuda_emulator.sanitize` (memcheck, racecheck) and
:func:`cuda_emulator.profile`, launches run a checked build of the same text instead
(see :mod:`cuda_emulator.sanitizer`). Like compute-sanitizer, these cover the process:
inside the block, every Python thread's launches are checked or counted, one call at a
time.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import pathlib
import re
import types
import warnings

from . import guard, sanitizer

__all__ = ["to_cpp", "inline_headers", "thread_order", "workers", "ORDERS",
           "time_budget", "KernelTimeout", "KernelInterrupted", "KernelFault",
           "guard_module", "guard_function", "INCLUDE_DIR"]

ORDERS = ("forward", "reverse", "shuffle")
_ENV = "ATTNBOOK_THREAD_ORDER"
_WORKERS_ENV = "ATTNBOOK_EMU_WORKERS"
_TIMEOUT_ENV = "ATTNBOOK_EMU_TIMEOUT"
# stands in for the CUDA toolkit's headers on the CPU
INCLUDE_DIR = pathlib.Path(__file__).resolve().parent / "include"


@contextlib.contextmanager
def set_env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def thread_order(order: str, seed: int = 0):
    """Run the emulator's threads in ``order`` ("forward", "reverse" or "shuffle" with
    ``seed``) inside the ``with`` block."""
    if order not in ORDERS:
        raise ValueError(f"thread order must be one of {ORDERS}, got {order!r}")
    return set_env(_ENV, f"shuffle:{seed}" if order == "shuffle" else order)


def workers(n: int):
    """Run the emulator's blocks on ``n`` OS threads inside the ``with`` block;
    ``workers(1)`` runs them one after another, in order, on the calling thread."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"workers must be a positive int, got {n!r}")
    return set_env(_WORKERS_ENV, str(n))


def time_budget(seconds: float):
    """Stop any launch that runs longer than ``seconds`` inside the ``with`` block,
    raising :class:`KernelTimeout` (``None`` or 0: no limit, not even the guard that
    stops a launch making no progress for 60 s)."""
    if seconds is None:
        seconds = 0
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or \
            not seconds >= 0:
        raise ValueError(f"time budget must be seconds >= 0, got {seconds!r}")
    return set_env(_TIMEOUT_ENV, repr(float(seconds)))


class KernelTimeout(RuntimeError):
    """A launch ran past its time budget and was stopped; the message names the kernel
    and the threads that had not finished."""


class KernelInterrupted(KernelTimeout, KeyboardInterrupt):
    """A launch was interrupted (SIGINT); caught by ``except KeyboardInterrupt`` too."""


class KernelFault(RuntimeError):
    """A thread of a launch faulted: an illegal memory access, a stack overflow, an
    out-of-bounds dynamic shared memory access, a division by zero. The message names
    the kernel, block and thread, the address and the source line; the process goes
    on, as after a CUDA error."""


# The emulator's messages for a stopped launch (emu_runtime.h, cancelled_message) and
# for a fault (fault_message).
_STOPPED = ((re.compile(r"kernel '[^']*' was interrupted after"), KernelInterrupted),
            (re.compile(r"kernel '[^']*' ran past its time budget"), KernelTimeout),
            (re.compile(r"kernel '[^']*' made no progress for"), KernelTimeout),
            (re.compile(r"kernel '[^']*', block \(.*\((SIGSEGV|SIGBUS|SIGFPE|SIGILL)"
                        r"\b"), KernelFault))


def guard_function(fn, path, counterpart, guard_memory):
    """``fn`` of the library at ``path``, raising :class:`KernelFault` and its kin
    (pybind11 raises RuntimeError). Inside sanitize() and profile(), ``counterpart``
    says what runs: a callable returning the (plain call, library) of the checked
    build's counterpart; "self" for a function of a checked build, run checked
    itself; None: ``fn`` as outside them."""
    def plain(*args, **kwargs):
        try:
            if guard_memory:
                return guard.guarded_call(fn, path, args, kwargs)
            return fn(*args, **kwargs)
        except guard.GuardFault as e:
            raise KernelFault(f"{call.__name__}: {e}") from None
        except RuntimeError as e:
            for pattern, cls in _STOPPED:
                if type(e) is RuntimeError and pattern.match(str(e)):
                    raise cls(sanitizer.resolve(str(e), path)[0]) from None
            raise

    def call(*args, **kwargs):
        mode = sanitizer.mode() if counterpart is not None else 0
        if mode:
            checked, library = (plain, path) if counterpart == "self" else \
                counterpart()
            return sanitizer.run_checked(checked, library, mode, args, kwargs)
        return plain(*args, **kwargs)
    call.__wrapped__, call.plain = fn, plain
    call.__name__ = getattr(fn, "__name__", "kernel")
    call.__qualname__ = getattr(fn, "__qualname__", call.__name__)
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


def _is_function(obj) -> bool:
    return type(obj).__name__ == "builtin_function_or_method"


def _is_class(obj) -> bool:
    return isinstance(obj, type) and type(obj).__name__ == "pybind11_type"


def _at(module, where):
    """The attribute at path ``where`` of ``module`` (a class's as stored)."""
    obj = module
    for name in where:
        obj = getattr(obj, name) if isinstance(obj, types.ModuleType) else \
            inspect.getattr_static(obj, name)
    return obj


def _counterpart(twin, place):
    """What runs inside sanitize()/profile() for the function at ``place``: "self" in
    a checked build (``twin`` None), else the checked build's function there."""
    if twin is None:
        return "self"

    def checked():
        obj = _at(twin(), place)   # a static method's function, or a function
        return getattr(obj, "__func__", obj).plain, twin().__file__
    return checked


class MadeOutsideWarning(UserWarning):
    """A method of an object made outside sanitize()/profile() ran there unchecked."""


def _method(cls, fn, path, twin, guard_memory):
    """A guarded method of pybind11 class ``cls``. Of the checked build (``twin``
    None) it runs checked inside sanitize(); of the default build it runs unchecked
    there, with a warning: the object is of the default build."""
    if twin is None:
        return guard_function(fn, path, "self", guard_memory)
    guarded = guard_function(fn, path, None, guard_memory)

    def method(*args, **kwargs):
        if sanitizer.mode() and guarded.__name__ != "__init__":
            warnings.warn(f"{cls.__name__}.{guarded.__name__}: the object was made "
                          "outside sanitize()/profile(), so its methods run "
                          "unchecked; make it inside to check them",
                          MadeOutsideWarning, stacklevel=2)
        return guarded(*args, **kwargs)
    method.__name__, method.__qualname__ = guarded.__name__, guarded.__qualname__
    method.__doc__, method.__wrapped__ = guarded.__doc__, fn
    return method


def _guard_class(cls, where, path, twin, guard_memory):
    """Guard the methods of pybind11 class ``cls``, at ``where`` in its module. Made
    inside sanitize()/profile(), an object of the default build's class is one of the
    checked build's."""
    if "__members__" in vars(cls):   # a py::enum_: no kernels
        return
    for name, member in list(vars(cls).items()):
        if name.startswith("__") and name not in ("__init__", "__call__"):
            continue
        if type(member).__name__ == "instancemethod":
            setattr(cls, name, _method(cls, member.__func__, path, twin, guard_memory))
        elif isinstance(member, staticmethod) and _is_function(member.__func__):
            setattr(cls, name, staticmethod(guard_function(
                member.__func__, path, _counterpart(twin, (*where, name)),
                guard_memory)))
    if twin is not None:
        new = cls.__new__

        def made(kind, *args, **kwargs):
            if kind is cls and sanitizer.mode():
                return _at(twin(), where)(*args, **kwargs)
            return new(kind)
        cls.__new__ = staticmethod(made)


def guard_module(module, names, twin=None, guard_memory=True):
    """Make the functions ``names`` of an emulator extension, and the methods of its
    pybind11 classes, raise :class:`KernelTimeout` or :class:`KernelInterrupted` for a
    stopped launch and :class:`KernelFault` for a faulting thread, in its submodules
    too; other attributes are left as they are. ``twin``: None for a checked build,
    whose functions then run checked inside :func:`cuda_emulator.sanitize` and
    :func:`cuda_emulator.profile`; for the default build, a callable returning the
    checked build of the same files, whose function at the same place runs there instead
    (inside them, ``module.Cls`` is the checked build's class, and an object is made of
    it). Outside them, ``guard_memory`` puts the call's tensors between unmapped pages
    (:mod:`.guard`), so that an access past one faults."""
    _guard_names(module, names, module.__file__, twin, guard_memory, ())
    return module


def _guard_names(module, names, path, twin, guard_memory, where):
    classes = {}
    for name in names:
        obj = getattr(module, name, None)
        place = (*where, name)
        if _is_function(obj):   # a guarded one is a Python function: not again
            setattr(module, name, guard_function(obj, path, _counterpart(twin, place),
                                                 guard_memory))
        elif _is_class(obj):
            _guard_class(obj, place, path, twin, guard_memory)
            classes[name] = obj
        elif isinstance(obj, types.ModuleType) and obj.__name__.startswith(
                module.__name__ + "."):
            _guard_names(obj, [n for n in dir(obj) if not n.startswith("_")], path,
                         twin, guard_memory, place)
    if twin is not None and classes:   # the checked build's class inside sanitize()
        module.__class__ = type(type(module).__name__, (type(module),), {
            name: property(lambda self, c=cls, p=(*where, name):
                           _at(twin(), p) if sanitizer.mode() else c)
            for name, cls in classes.items()})


def blank_out(source: str, strings: bool) -> str:
    """Replace comments (and, if ``strings``, the insides of literals) by spaces,
    keeping every newline, so positions in the result are positions in ``source``."""
    out = list(source)
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out[i:j] = [ch if ch == "\n" else " " for ch in source[i:j]]
            i = j
        elif c == "'" and _in_number(source, i):   # a digit separator: 48'000
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c:
                j += 2 if source[j] == "\\" else 1
            if strings:
                out[i + 1:j] = " " * (j - i - 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _in_number(source: str, i: int) -> bool:
    """Whether the ``'`` at ``i`` is inside a number (a C++14 digit separator)."""
    j = i
    while j > 0 and (source[j - 1].isalnum() or source[j - 1] in "_.'"):
        j -= 1
    return j < i and source[j].isdigit()


def _keep_lines(old: str, new: str) -> str:
    return new + "\n" * (old.count("\n") - new.count("\n"))


_ALIGN = r"(?:(?:__align__|alignas)\s*\((?:[^()]|\([^()]*\))*\)\s*|volatile\s+)*"
_EXTERN_SHARED = re.compile(
    r"extern\s+" + _ALIGN + r"__shared__\s+" + _ALIGN +
    r"([A-Za-z_][\w:<>, ]*?[\w>])\s+" + _ALIGN +
    r"([A-Za-z_]\w*)\s*\[\s*\]\s*;")
# `static __shared__` (or `__shared__ static`) is, in a kernel, `__shared__`
_STATIC_SHARED = re.compile(r"(?<!\w)(?:static\s+)?__shared__(?!\w)(?:\s*static\b)?"
                            r"([^;]*);")
_LEADING_ALIGN = re.compile(r"\s*((?:(?:__align__|alignas)\s*\((?:[^()]|\([^()]*\))*\)"
                            r"\s*)+)")


def _extern_shared(code: str) -> str:
    def sub(m):
        t, name = m.group(1), m.group(2)
        if re.search(r"\bvolatile\b", m.group(0)) and "volatile" not in t:
            t = "volatile " + t
        return _keep_lines(m.group(0), f"{t}* const {name} = reinterpret_cast<{t}*>("
                                       f"::attnbook_emu::rt().dynamic_smem);")
    return _EXTERN_SHARED.sub(sub, code)


def _declared_spans(decl: str) -> list[tuple[int, int]]:
    """Where in ``decl`` (a declaration without its ``;``) each declared name is."""
    spans, depth, start = [], 0, 0
    for i, ch in enumerate(decl + ","):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            head = re.split(r"[\[=]", decl[start:i], maxsplit=1)[0]
            ids = list(re.finditer(r"[A-Za-z_]\w*", head))
            if ids:
                spans.append((start + ids[-1].start(), start + ids[-1].end()))
            start = i + 1
    return spans


def _static_shared(code: str, masked: str) -> str:
    """Each static ``__shared__`` variable (a thread-local: one per worker) is renamed,
    and its name bound to a reference to it: its address is then looked up once per
    thread, not at every use (each lookup is a call in a shared library)."""
    edits = []
    for m in _STATIC_SHARED.finditer(masked):
        whole, decl = code[m.start():m.end()], code[m.start(1):m.end(1)]
        if masked[:m.start()].count("{") - masked[:m.start()].count("}") <= 0:
            # namespace scope: no statement may follow, and no block to poison for;
            # only a `static` beside __shared__ (which is static already) goes
            edits.append((m.start(), m.end(), _keep_lines(whole, f"__shared__{decl};")))
            continue
        # An alignment written after __shared__ goes before it: after `static
        # thread_local` it would sit among the specifiers, which C++ forbids.
        lead = _LEADING_ALIGN.match(decl)
        head = f"{lead.group(1)}__shared__ " if lead else "__shared__"
        decl = decl[lead.end():] if lead else decl
        spans = _declared_spans(decl)
        names = [decl[a:b] for a, b in spans]
        for a, _ in reversed(spans):
            decl = decl[:a] + "attnbook_shared_" + decl[a:]
        text = decl + ";" + "".join(
            f" auto& {n} = *::attnbook_emu::opaque(&attnbook_shared_{n});"
            f" ::attnbook_emu::poison_static_shared(&{n}, sizeof({n}));" for n in names)
        edits.append((m.start(), m.end(), _keep_lines(whole, head + text)))
    for start, end, text in reversed(edits):
        code = code[:start] + text + code[end:]
    return code


def _kernel_start(masked: str, end: int) -> int:
    """Index where the kernel expression before ``<<<`` at ``end`` begins."""
    i = end
    while i > 0 and masked[i - 1].isspace():
        i -= 1
    if i > 0 and masked[i - 1] == ">":          # template arguments: kernel<T, 64>
        depth = parens = 0                     # a '>' inside (a > b) is no bracket
        while i > 0:
            i -= 1
            c = masked[i]
            parens += {")": 1, "(": -1}.get(c, 0)
            if parens == 0:
                depth += {">": 1, "<": -1}.get(c, 0)
            if depth == 0:
                break
    while i > 0 and (masked[i - 1].isalnum() or masked[i - 1] in "_:#"):
        i -= 1   # '#': a name a macro pastes together, add_##t##_kernel
    return i


_BUILTIN_DECL = re.compile(      # dim3 grid(8), blockDim(256): the second one too
    r"\b(?:dim3|uint3|auto|int|unsigned|size_t)\s*[&*]?\s*"
    r"(?:(?:[^;{}()]|\((?:[^()]|\([^()]*\))*\))*?,\s*)?"
    r"(gridDim|blockDim|blockIdx|threadIdx)\b(?=\s*[(;={,)\[])")


def _scope_end(masked: str, pos: int) -> int:
    """End of the scope of a name declared at ``pos``: its block, or for a parameter,
    the body of its function."""
    parens = braces = 0
    for i in range(pos, len(masked)):
        c = masked[i]
        parens += {"(": 1, ")": -1}.get(c, 0)
        braces += {"{": 1, "}": -1}.get(c, 0)
        if parens < 0:                  # a parameter: to the end of the body after it
            body = masked.find("{", i)
            return len(masked) if body < 0 else _scope_end(masked, body + 1)
        if braces < 0:
            return i
    return len(masked)


def _host_builtins(code: str) -> str:
    """A host variable named like a built-in (``dim3 gridDim(n / 256);``) is renamed in
    its scope, since the built-ins are macros on the emulator."""
    while True:
        masked = blank_out(code, strings=True)
        m = _BUILTIN_DECL.search(masked)
        if not m:
            return code
        name, end = m.group(1), _scope_end(masked, m.end(1))
        ident = re.compile(rf"(?<![\w.>]){name}\b")
        spans = [x.span() for x in ident.finditer(masked, m.start(1), end)]
        for a, b in reversed(spans):
            code = code[:a] + "attnbook_host_" + name + code[b:]


_DEVICE = re.compile(r"(?<!\w)__(?:global|device)__(?!\w)")


def _device_bodies(masked: str) -> list[tuple[int, int]]:
    """The spans of the bodies of ``__global__`` and ``__device__`` functions (a
    head with parentheses, then a block; not a ``__device__`` variable)."""
    spans, end = [], 0
    for m in _DEVICE.finditer(masked):
        if m.start() < end:
            continue
        brace, stop = masked.find("{", m.end()), masked.find(";", m.end())
        if brace < 0 or 0 <= stop < brace or "(" not in masked[m.end():brace]:
            continue
        depth, i = 1, brace + 1
        while depth and i < len(masked):
            depth += {"{": 1, "}": -1}.get(masked[i], 0)
            i += 1
        spans.append((brace, i))
        end = i
    return spans


def _launches(code: str) -> str:
    while True:
        masked = blank_out(code, strings=True)
        open_ = masked.find("<<<")
        if open_ < 0:
            return code
        line = masked[:open_].count(chr(10)) + 1
        close = masked.find(">>>", open_)
        if close < 0:
            raise SyntaxError(f"line {line}: '<<<' without '>>>'")
        if any(a < open_ < b for a, b in _device_bodies(masked)):
            raise SyntaxError(f"line {line}: a kernel launched from device code "
                              "(dynamic parallelism) does not run on the emulator "
                              "(nvcc, too, refuses it without -rdc=true)")
        start = _kernel_start(masked, open_)
        kernel = code[start:open_].strip()
        if not kernel:
            raise SyntaxError(f"line {line}: no kernel before '<<<'")
        name = " ".join(code[start:open_].split())   # one line, whatever the source
        # its address where the kernel is one function, else a call that resolves an
        # overload or deduces a template from the arguments (emu_runtime.h,
        # launch_of); names a macro's parameters cannot be
        address = f"::attnbook_emu::kernel_address<decltype(attnbook_t)>({name})"
        head = (f"::attnbook_emu::launch_of([&](auto attnbook_t) -> decltype("
                f"{address}) {{ return {address}; }}, [&](auto&... attnbook_a) "
                f'{{ {name}(attnbook_a...); }}, "{name}").cfg(')
        code = (code[:start] + head + "\n" * kernel.count("\n") + code[open_ + 3:close]
                + ")" + code[close + 3:])


_LOCAL_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([\w./-]+)"[^\n]*$', re.M)


def inline_headers(source: str, name: str, folders, seen=None) -> str:
    """``source`` with every ``#include "x"`` found in ``folders`` (searched in order),
    whatever its extension, replaced by the header's text, recursively and once each
    (``#pragma once``; ``seen``, a set, carries that over to another text of the same
    translation unit). Other headers are left to the compiler's include path."""
    folders = [folders] if isinstance(folders, (str, os.PathLike)) else list(folders)
    seen = set() if seen is None else seen
    out, last = [], 0
    for m in _LOCAL_HEADER.finditer(source):
        path = next((pathlib.Path(f) / m.group(1) for f in folders
                     if (pathlib.Path(f) / m.group(1)).is_file()), None)
        if path is None:
            continue
        out.append(source[last:m.start()])
        last = m.end()
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        text = re.sub(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*$", "", path.read_text(),
                      flags=re.M)
        line = source.count("\n", 0, m.end()) + 2
        out.append(f'#line 1 "{path.name}"\n'
                   f'{inline_headers(text, path.name, [path.parent, *folders], seen)}\n'
                   f'#line {line} "{name}"')
    out.append(source[last:])
    return "".join(out)


def join_lines(source: str) -> str:
    """``source`` with each backslash-newline spliced away, as C's second translation
    phase does before comments and macros are seen: a macro written over several lines
    becomes one line, followed by as many empty lines as it lost, so every line after
    it keeps its number."""
    out, joined, held = [], "", 0
    for line in source.split("\n"):
        text = line.rstrip(" \t\r")
        if text.endswith("\\"):
            joined += text[:-1]
            held += 1
            continue
        out += [joined + line] + [""] * held
        joined, held = "", 0
    if held:
        out += [joined] + [""] * (held - 1)
    return "\n".join(out)


def to_cpp(source: str) -> str:
    """The kernel source as C++ for the emulator: same lines, CUDA-only syntax
    rewritten (in macros too). Comments are dropped (replaced by blanks)."""
    code = blank_out(join_lines(source), strings=False)
    code = _extern_shared(code)
    code = _static_shared(code, blank_out(code, strings=True))
    return _launches(_host_builtins(code))
