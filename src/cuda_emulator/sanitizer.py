"""What compute-sanitizer and a profiler give on a GPU, for kernels on the emulator.

Checked mode (memcheck, racecheck and initcheck)::

    with ab.sanitize():
        out = ab.attention(q, k, v)   # any emulator launch: package ops, ab.compile

or ``ATTNBOOK_SANITIZE=1`` in the environment for a whole run. Inside, every launch
runs a separate, checked build of the same kernel text (compiled on first use; outside,
launches keep the plain build and its speed), in which every global, shared and local
access of kernel code is checked:

* memcheck: global accesses must fall in the storage of a tensor the call received, a
  tensor allocated while it ran (outputs, workspaces), ``cudaMalloc`` memory, the
  kernel's arguments or the extension's own ``__constant__`` data; shared ones in the
  block's static ``__shared__`` variables or in the dynamic shared memory the launch
  asked for (not merely what the emulator reserves); local ones in the thread's own
  stack. The first bad access stops the launch with :class:`MemcheckError`, which
  names it as compute-sanitizer does: ``memcheck: invalid __global__ write of size 4
  bytes at vector_add.cu:7 in kernel 'add' by thread (5,0,0) in block (1,0,0):
  address 0x... is out of bounds: 4 bytes past the end of a 4096-byte allocation at
  0x...``; its attributes hold the parts (``kind``, ``space``, ``size``,
  ``location``, ``thread``, ``block``, ``detail``). Kernel code that an error
  stopped leaves no trace: the next launch runs normally. As on a GPU, a tensor's
  bounds are its storage's (a view's neighbours in the same storage pass). An
  asynchronous copy (``cp.async``, ``__pipeline_memcpy_async``) is checked at both ends
  where it is issued; other copies the C library makes (a large ``memcpy``) are not
  seen.
* racecheck: two accesses to the same shared byte by different threads, at least one a
  write, with no ``__syncthreads`` between them (nor a named barrier, ``bar.sync id``,
  both took part in, nor within a warp a ``__syncwarp`` or other collective taken by
  both) raise :class:`RaceError` at the end of the launch: the hazard
  (read-after-write, write-after-read, write-after-write) and both access sites. It is
  found whatever order the threads run in, so also where the emulator's schedule hides
  it (a warp collective holds every lane of a warp until all arrive). Atomics never
  race; an asynchronous copy writes its shared destination from the moment it is
  issued. Each 4-byte word keeps two writers of different bytes (the two halves of
  16-bit elements) and two readers, and two threads count as ordered once both have
  passed a named barrier or collective after the first access, even different ones: a
  hazard can go unreported where more threads share a word or such barriers
  interleave; none is ever made up.
* initcheck: a kernel's read (or atomic update) of global memory the call allocated
  (``torch::empty``, ``cudaMalloc``) that neither host code (``torch::zeros``,
  ``cudaMemset``, a copy) nor a kernel has written raises :class:`InitcheckError`:
  ``initcheck: uninitialized __global__ read of size 4 bytes at ...``, the rest as
  memcheck's. Such memory starts out holding a pattern of signalling NaNs; host code
  overwrites it, a kernel's write replaces it word by word, and a read of a 4-byte word
  that still holds it is reported. The call's own tensors count as written, and a word
  with any byte written counts as written (the bytes beside a 1- or 2-byte element
  written go unreported).

Profile::

    with ab.profile() as report:
        ab.attention(q, k, v)
    print(report)                    # one table per launch, one row per source line
    report.launches[0].rows          # the numbers: LineCounts per line and access kind

counts, per launch and source line, warp-wide requests (a warp's accesses grouped by the
instruction that made them), the 32-byte sectors global requests touch and the
wavefronts shared requests take (32 banks of 4 bytes; 64-bit accesses in two phases of
16 lanes, 128-bit in four of 8: a wavefront per phase when there is no bank conflict),
bytes moved, and the barriers passed (``__syncthreads``, per line and launch). A
stride-1 float load is 4 sectors per request, a stride-32 one 32; reading a 32x32
float tile by column takes 32 wavefronts, padded to 33 columns or XOR-swizzled 1.
Known limits: no timing, no caches (sectors are requested, not missed), local memory
is not counted (the CPU's registers are not the GPU's), and lines inside
``ab.compile``'d text are named ``cell.cu``.

The checked build costs a call per memory access: on the fused fp32 attention
(B=2, H=2, S=64, D=64, causal, where the plain emulator takes half a millisecond on
one CPU thread), memcheck takes about 13 times the plain time, memcheck with racecheck
about 17 times, and with initcheck too about the same
(``sanitize(racecheck=False, initcheck=False)`` for memcheck alone), and the profile
about 58.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import pathlib
import re
import subprocess
import textwrap
import threading
import warnings

import torch

__all__ = ["sanitize", "profile", "SanitizerError", "MemcheckError", "InitcheckError",
           "RaceError", "ProfileReport", "LaunchProfile", "LineCounts",
           "library_folder"]

MEMCHECK, RACECHECK, PROFILE, INITCHECK = 1, 2, 4, 8
_ENV = "ATTNBOOK_SANITIZE"
_active: list[int] = []   # the checks of each sanitize() block entered
_reports: list["ProfileReport"] = []


class SanitizerError(RuntimeError):
    """A checked launch found an error in kernel code."""


_ACCESS = re.compile(r"(?:memcheck: invalid|initcheck: uninitialized) "
                     r"(?P<space>__\w+__) (?P<kind>\w+) of size "
                     r"(?P<size>\d+) bytes at (?P<location>\S+) in kernel '(?P<kernel>"
                     r"[^']*)' by thread \((?P<thread>[\d,]+)\) in block \((?P<block>"
                     r"[\d,]+)\): address (?P<address>0x[0-9a-f]+) (?P<detail>.*)")


class MemcheckError(SanitizerError):
    """An access outside what the kernel may touch. Attributes: ``kind`` ("read",
    "write", "atomic"), ``space`` ("global", "shared", "local"), ``size`` (bytes),
    ``location`` ("file:line"), ``kernel``, ``thread`` and ``block`` (x, y, z),
    ``address`` and ``detail`` (where the address lies)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.kind = self.space = self.size = self.location = self.kernel = None
        self.thread = self.block = self.address = self.detail = None
        m = _ACCESS.search(message)
        if m:
            self.kind, self.space = m["kind"], m["space"].strip("_")
            self.size, self.location, self.kernel = int(m["size"]), m["location"], \
                m["kernel"]
            self.thread = tuple(int(x) for x in m["thread"].split(","))
            self.block = tuple(int(x) for x in m["block"].split(","))
            self.address, self.detail = int(m["address"], 16), m["detail"]


class InitcheckError(MemcheckError):
    """A kernel read memory that nothing wrote: global memory the call allocated
    (``torch::empty``, ``cudaMalloc``) and neither host code nor a kernel had written
    where it was read. Attributes as :class:`MemcheckError`'s (``kind`` "read" or
    "atomic")."""


class RaceError(SanitizerError):
    """A shared-memory hazard between two barriers; the message names its kind and the
    two access sites (``sites``: their "file:line")."""

    def __init__(self, message: str, sites=()):
        super().__init__(message)
        self.hazard = message.split(" hazard", 1)[0].split()[-1]
        self.sites = tuple(sites)


def _env_on() -> bool:
    return os.environ.get(_ENV, "").strip() not in ("", "0")


def mode() -> int:
    """The checks and counts the next emulator launch makes (0: plain launch)."""
    checks = MEMCHECK | RACECHECK | INITCHECK if _env_on() else 0
    for c in _active:
        checks |= c
    return checks | (PROFILE if _reports else 0)


@contextlib.contextmanager
def sanitize(memcheck: bool = True, racecheck: bool = True, initcheck: bool = True):
    """Run memcheck, racecheck and initcheck (or those asked for: memcheck alone costs
    about three quarters as much as memcheck and racecheck) on every emulator launch
    inside the ``with`` block (see the module's documentation)."""
    checks = ((MEMCHECK if memcheck else 0) | (RACECHECK if racecheck else 0)
              | (INITCHECK if initcheck else 0))
    _active.append(checks)
    try:
        yield
    finally:
        _active.remove(checks)


@contextlib.contextmanager
def profile():
    """Count the memory traffic of every emulator launch inside the ``with`` block into
    the :class:`ProfileReport` it yields."""
    report = ProfileReport()
    _reports.append(report)
    try:
        yield report
    finally:
        _reports.remove(report)


def _storage_spans(objs) -> list[int]:
    """address, bytes, ... of the storages of the tensors among ``objs`` (and in lists,
    tuples and dicts of them)."""
    spans = []
    for obj in objs:
        if (isinstance(obj, torch.Tensor) and obj.device.type == "cpu"
                and obj.layout == torch.strided):
            st = obj.untyped_storage()
            spans += [st.data_ptr(), st.nbytes()]
        elif isinstance(obj, (list, tuple)):
            spans += _storage_spans(obj)
        elif isinstance(obj, dict):
            spans += _storage_spans(obj.values())
    return spans


# Frames in these folders are the emulator's or a library's: an access made there (an
# atomicAdd's compare-and-swap loop) is named by the kernel line that called it.
_NOT_KERNEL = [str(pathlib.Path(__file__).parent / "include"), "/usr/",
               str(pathlib.Path(torch.__file__).parent)]


def library_folder(folder) -> None:
    """Name an access made by code in ``folder`` (a library's headers a build
    includes, such as a wrapper's helpers) by the kernel line that called it."""
    if str(folder) not in _NOT_KERNEL:
        _NOT_KERNEL.append(str(folder))


_lines: dict[tuple[str, int], str] = {}   # (library, offset) -> "file:line"


def _addr2line(path: str, offsets: list[int]) -> list[str]:
    """addr2line's frames for each offset of the library ``path``, a block of lines
    each. A run that answers for fewer offsets than asked (seen once in CI, with
    nothing on stdout) is tried again; if it fails three times, each offset is named
    ``library+0x...`` and a warning gives addr2line's own words."""
    for _ in range(3):
        done = subprocess.run(["addr2line", "-e", path, "-i", "-a"] +
                              [hex(o) for o in offsets], capture_output=True,
                              text=True, check=False)
        blocks = re.split(r"^0x[0-9a-f]+$", done.stdout, flags=re.M)[1:]
        if len(blocks) == len(offsets):
            return blocks
    name = os.path.basename(path)
    warnings.warn(f"addr2line could not read {name} (exit {done.returncode}: "
                  f"{done.stderr.strip()[:300]!r}); accesses are named by offset")
    return [f"{name}+{hex(o)}:?" for o in offsets]


def _source_lines(path: str, offsets) -> dict[int, str]:
    """"file:line" of each code offset of the shared library ``path``: its innermost
    inlined frame in kernel text, which is where the access is written."""
    todo = sorted({o for o in offsets if (path, o) not in _lines})
    if todo:
        blocks = _addr2line(path, todo)
        for offset, block in zip(todo, blocks):
            frames = block.strip().splitlines() or ["??:0"]
            first = next((f for f in frames if not f.startswith(tuple(_NOT_KERNEL))),
                         frames[0])
            name, _, line = first.rpartition(":")
            _lines[path, offset] = f"{os.path.basename(name)}:{line.split()[0]}"
    return {o: _lines[path, o] for o in offsets}


def resolve(message: str, path: str) -> tuple[str, list[str]]:
    """``message`` with each ``@pc(0x...)`` replaced by its file:line."""
    pcs = [int(m, 16) for m in re.findall(r"@pc\((0x[0-9a-f]+)\)", message)]
    names = _source_lines(path, pcs)
    return re.sub(r"@pc\((0x[0-9a-f]+)\)", lambda m: names[int(m[1], 16)],
                  message), [names[p] for p in pcs]


_libraries: dict[str, ctypes.CDLL] = {}
# A checked call's session (what its kernels may touch, what they counted) is its
# library's, from begin to end: calls from several Python threads take turns (while
# one launches, the others' Python code runs: a checked launch releases the GIL).
_one_call = threading.RLock()


def _entry_points(path: str) -> ctypes.CDLL:
    """The checked build ``path``'s C entry points (emu_checked.h)."""
    if path not in _libraries:
        lib = ctypes.CDLL(path)
        i64, p64 = ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)
        lib.attnbook_checked_begin.argtypes = [i64, p64, i64]
        lib.attnbook_checked_begin.restype = None
        lib.attnbook_checked_end.argtypes = [
            ctypes.POINTER(p64), p64, ctypes.POINTER(ctypes.c_char_p), p64,
            ctypes.POINTER(p64), p64]
        lib.attnbook_checked_end.restype = None
        _libraries[path] = lib
    return _libraries[path]


def _checked_end(lib):
    """(launches, names, counts) of the call that attnbook_checked_begin started."""
    launches, counts = (ctypes.POINTER(ctypes.c_int64)() for _ in range(2))
    nlaunches, ncounts, name_bytes = (ctypes.c_int64() for _ in range(3))
    names = ctypes.c_char_p()
    lib.attnbook_checked_end(ctypes.byref(launches), ctypes.byref(nlaunches),
                             ctypes.byref(names), ctypes.byref(name_bytes),
                             ctypes.byref(counts), ctypes.byref(ncounts))
    text = ctypes.string_at(names, name_bytes.value).decode()
    return ([launches[8 * i:8 * i + 8] for i in range(nlaunches.value)],
            text.split("\0")[:-1],
            [counts[8 * i:8 * i + 8] for i in range(ncounts.value)])


def run_checked(fn, path: str, checks: int, args, kwargs):
    """Call ``fn`` of the checked build at ``path`` with ``checks``, turning what it
    finds into exceptions and profile counts."""
    lib = _entry_points(path)
    spans = _storage_spans([*args, *kwargs.values()])
    with _one_call:
        lib.attnbook_checked_begin(checks, (ctypes.c_int64 * len(spans))(*spans),
                                   len(spans))
        try:
            result = fn(*args, **kwargs)
        except RuntimeError as e:
            text = str(e)
            if "initcheck: " in text:
                raise InitcheckError(resolve(text, path)[0]) from None
            if "memcheck: " in text:
                raise MemcheckError(resolve(text, path)[0]) from None
            if "racecheck: " in text:
                raise RaceError(*resolve(text, path)) from None
            raise
        finally:
            launches, names, counts = _checked_end(lib)
    if checks & PROFILE:
        profiled = _launch_profiles(path, launches, names, counts)
        for report in _reports:
            report.launches += profiled
    return result


@dataclasses.dataclass
class LineCounts:
    """One source line's accesses of one kind (space "global"/"shared", op
    "load"/"store") in one launch. ``units``: sectors (global) or wavefronts (shared);
    ``ideal``: wavefronts without bank conflicts (shared only). A ``__syncthreads``
    line has space "block", op "barrier" and ``requests``: the times a block passed
    it, summed over blocks."""
    location: str
    space: str
    op: str
    requests: int = 0
    units: int = 0
    ideal: int = 0
    bytes: int = 0

    @property
    def per_request(self) -> float:
        """Sectors (global) or wavefronts (shared) per request."""
        return self.units / self.requests if self.requests else 0.0

    @property
    def conflict_ways(self) -> float:
        """Shared: wavefronts per conflict-free wavefront (1: no bank conflict)."""
        return self.units / self.ideal if self.ideal else 0.0


@dataclasses.dataclass
class LaunchProfile:
    """One launch's profile: the kernel, its grid and block (x, y, z), the dynamic
    shared memory it asked for, the barriers its blocks passed, and ``rows``
    (:class:`LineCounts`, by file and line)."""
    kernel: str
    grid: tuple
    block: tuple
    shared_bytes: int
    barriers: int
    rows: list

    def total(self, space: str, op: str) -> LineCounts:
        """The launch's counts for one space and op, over all lines."""
        t = LineCounts("all", space, op)
        for r in self.rows:
            if (r.space, r.op) == (space, op):
                t.requests += r.requests
                t.units += r.units
                t.ideal += r.ideal
                t.bytes += r.bytes
        return t

    def line(self, location: str, space: str, op: str) -> LineCounts:
        """The row of ``location`` ("file:line") for one space and op."""
        for r in self.rows:
            if (r.location, r.space, r.op) == (location, space, op):
                return r
        raise KeyError(f"no {space} {op} on {location} in kernel {self.kernel!r}")

    def __str__(self):
        head = f"kernel '{self.kernel}' grid {self.grid} block {self.block}"
        out = [textwrap.fill(head, 88, subsequent_indent="  ", break_long_words=False,
                             break_on_hyphens=False),
               f"  {self.shared_bytes} B dynamic shared, {self.barriers} barriers",
               f"{'line':<8}{'space':<8}{'op':<7}{'requests':>10}{'sectors':>10}"
               f"{'/req':>7}{'wavefr.':>10}{'ways':>6}{'bytes':>12}"]
        shown = None
        for r in self.rows:   # a file's name on a line of its own, then its lines
            file, _, line = r.location.rpartition(":")
            if file != shown:
                out.append(file or r.location)
                shown = file
            row = f"{'  ' + line:<8}{r.space:<8}{r.op:<7}{r.requests:>10}"
            if r.space == "global":
                row += f"{r.units:>10}{r.per_request:>7.2f}{'':>16}{r.bytes:>12}"
            elif r.space == "shared":
                row += (f"{'':>10}{r.per_request:>7.2f}{r.units:>10}"
                        f"{r.conflict_ways:>6.1f}{r.bytes:>12}")
            out.append(row)
        return "\n".join(out)


def _launch_profiles(path, launches, names, counts) -> list[LaunchProfile]:
    lines = _source_lines(path, [c[1] for c in counts])
    out = [LaunchProfile(n, tuple(l[0:3]), tuple(l[3:6]), l[6], l[7], [])
           for n, l in zip(names, launches)]
    merged = {}
    for launch, pc, space, write, requests, units, ideal, nbytes in counts:
        op = "barrier" if space == 2 else ("load", "store")[write]
        key = (launch, lines[pc], ("global", "shared", "block")[space], op)
        row = merged.get(key)
        if row is None:
            row = merged[key] = LineCounts(*key[1:])
            out[launch].rows.append(row)
        row.requests += requests
        row.units += units
        row.ideal += ideal
        row.bytes += nbytes
    for p in out:   # by file, then line ("?" when addr2line knows none: first)
        p.rows.sort(key=lambda r: (r.location.rpartition(":")[0],
                                   int(r.location.rpartition(":")[2].isdigit() and
                                       r.location.rpartition(":")[2]), r.space, r.op))
    return out


@dataclasses.dataclass
class ProfileReport:
    """What :func:`profile` counted: ``launches``, a :class:`LaunchProfile` per launch
    in order, each with its ``rows`` (:class:`LineCounts`)."""
    launches: list = dataclasses.field(default_factory=list)

    def __str__(self):
        return "\n\n".join(str(p) for p in self.launches) or "no emulator launches"
