"""A CUDA program with its own ``main()``, run on the CPU emulator::

    python -m cuda_emulator.program run [-I DIR] [-D NAME[=VALUE]] [--sanitize]
                                        [--arch sm_XY] prog.cu [more.cu ...] [ARGS...]

builds ``prog.cu`` (``cudaMalloc``, ``cudaMemcpy``, kernel launches, events: the
emulator's host API), and the other source files (``.cu``, ``.cpp``, ``.cc``, ``.c``)
that follow it, each its own translation unit, with the host compiler against the
emulator, and runs the program with ``ARGS``, as ``nvcc prog.cu more.cu -o prog &&
./prog ARGS`` would on a GPU: its output, its exit status. ``-I`` and ``-D`` are
nvcc's; ``--arch`` sets ``__CUDA_ARCH__`` (sm_80 by default); ``--sanitize`` builds it
checked, memcheck, racecheck and initcheck on from the start, as
:func:`cuda_emulator.sanitize` does for a module. An error of a launch (a faulting
thread, a failed assert, a memcheck, racecheck or initcheck report) ends the program
with status 1 and its message, with the kernel's ``file:line``, on stderr. Executables
are cached in torch's extension folder, by their text and flags.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading

from . import sanitizer
from .build import Build, CompileError

__all__ = ["build", "run", "main"]

SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")


def build(source, includes=(), defines=(), arch: str = "sm_80", sanitize: bool = False,
          verbose: bool = False, log=None) -> pathlib.Path:
    """The executable of the CUDA program ``source`` (a path, or a list of the paths
    of its files) for the emulator, compiled unless cached. ``includes``: folders for
    ``#include``; ``defines``: ``NAME`` or ``NAME=VALUE``; ``log``: where the build's
    one line goes (by default the ``cuda_emulator`` logger, see
    :func:`~cuda_emulator.build.report_build`)."""
    paths = [pathlib.Path(source)] if isinstance(source, (str, os.PathLike)) else \
        [pathlib.Path(s) for s in source]
    if not paths:
        raise ValueError("a program needs at least one source file")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"no program {str(path)!r}")
    if not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise ValueError(f"arch must look like 'sm_80', got {arch!r}")
    folders = [*dict.fromkeys(p.parent for p in paths), *map(pathlib.Path, includes),
               pathlib.Path.cwd()]
    program = Build(re.sub(r"[^A-Za-z0-9_]", "_", paths[0].stem),
                    [(path.read_text(), path.name) for path in paths],
                    folders=folders, includes=folders, arch=arch, defines=defines,
                    head='#include "cuda_emulator.h"\n',
                    tail='#include "emu_program.h"\n', verbose=verbose)
    return program.executable(checked=sanitize, log=log)


def _relay(stream, write, out):
    """Each line of ``stream`` through ``write``, then ``out`` flushed; a line that
    cannot be written (its address not found) goes as it came, so that the pipe is
    always drained and the program never blocks on it."""
    for line in stream:
        try:
            write(line)
        except Exception:   # whatever it was, the pipe must keep flowing
            out.write(line)
        out.flush()


def _relay_in_thread(*args):
    """:func:`_relay` in a helper thread that takes no Ctrl-C: the kernel hands a
    process's SIGINT to any thread not blocking it, and one handed to a helper blocked
    in a read wakes nothing, so the main thread, which stops the program, must be the
    only one to take it."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    _relay(*args)


def run(source, args=(), **options) -> int:
    """Build the program ``source`` (its path, or its files' paths; see :func:`build`
    for ``options``) and run it with ``args``; its stdout and stderr are written to
    this process's line by line as it prints them (a notebook's cell shows them; a
    program stopped early has shown what it printed), each kernel address named by its
    ``file:line``. Returns its exit status."""
    exe = build(source, **options)
    child = subprocess.Popen([str(exe), *map(str, args)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, errors="replace")
    # a daemon: an interrupted run neither closes the pipe under its read nor waits for
    # it at exit
    errors = threading.Thread(target=_relay_in_thread, daemon=True, args=(
        child.stderr, lambda line: (
            sys.stderr.write(sanitizer.resolve(line, str(exe))[0])), sys.stderr))
    errors.start()
    try:
        _relay(child.stdout, sys.stdout.write, sys.stdout)
        errors.join()
        child.stdout.close()
        child.stderr.close()
        return child.wait()
    except BaseException:   # Ctrl-C: the program stops too
        child.kill()
        child.wait()
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cuda_emulator.program",
        description="Build a CUDA program with its own main() for the CPU emulator "
                    "and run it, as nvcc prog.cu -o prog && ./prog ARGS would.")
    parser.add_argument("command", choices=["run"])
    parser.add_argument("-I", dest="includes", action="append", default=[],
                        metavar="DIR", help="a folder for #include")
    parser.add_argument("-D", dest="defines", action="append", default=[],
                        metavar="NAME[=VALUE]", help="a macro")
    parser.add_argument("--arch", default="sm_80", help="__CUDA_ARCH__ (sm_80)")
    parser.add_argument("--sanitize", action="store_true",
                        help="memcheck, racecheck and initcheck every launch")
    parser.add_argument("program", help="the .cu file")
    parser.add_argument("args", nargs=argparse.REMAINDER,
                        help="the program's other source files, then its arguments")
    a = parser.parse_args(argv)
    sources, args = [a.program], list(a.args)
    while args and args[0].endswith(SOURCE_SUFFIXES) and os.path.isfile(args[0]):
        sources.append(args.pop(0))
    try:
        return run(sources, args, includes=a.includes, defines=a.defines,
                   arch=a.arch, sanitize=a.sanitize, log=sys.stderr)
    except (CompileError, FileNotFoundError, ValueError) as e:
        print(e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
