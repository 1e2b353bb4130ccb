"""A CUDA program with its own ``main()``, run on the CPU emulator::

    python -m attnbook.toolchain.program run [-I DIR] [-D NAME[=VALUE]] [--sanitize]
                                             [--arch sm_XY] prog.cu [more.cu ...]
                                             [ARGS...]

builds ``prog.cu`` (``cudaMalloc``, ``cudaMemcpy``, kernel launches, events: the
emulator's host API), and the other source files (``.cu``, ``.cpp``, ``.cc``, ``.c``)
that follow it, each its own translation unit, with the host compiler against the
emulator, and runs the program with ``ARGS``, as ``nvcc prog.cu more.cu -o prog &&
./prog ARGS`` would on a GPU: its output, its exit status. ``-I`` and ``-D`` are
nvcc's; ``--arch`` sets ``__CUDA_ARCH__`` (sm_80 by default); ``--sanitize`` builds it
checked, memcheck, racecheck and initcheck on from the start, as
:func:`attnbook.sanitize` does for a module. An error of a launch (a faulting thread, a
failed assert, a memcheck, racecheck or initcheck report) ends the program with status
1 and its message, with the kernel's ``file:line``, on stderr. Executables are cached
in torch's extension folder, by their text and flags.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import torch

from ..emulator import emulate, ptx, sanitizer
from .compile import (CHECKED_FLAGS, CPU_FLAGS, EMULATOR_DIR, EMULATOR_TARGET,
                      INCLUDE_DIR, CompileError, arch_number, build_directory,
                      build_lock, cpp_extension, emulator_headers, report_build,
                      short_error)
from .progress import build_progress

__all__ = ["build", "run", "main"]

# A program's main() is host code, which may keep large arrays on its stack: the
# device's 512 KiB of local memory bounds kernels only, whose frames cannot be told
# apart here.
_FLAGS = [f for f in CPU_FLAGS if not f.startswith("-Werror=frame-larger-than")]


SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")


def build(source, includes=(), defines=(), arch: str = "sm_80", sanitize: bool = False,
          verbose: bool = False, log=None) -> pathlib.Path:
    """The executable of the CUDA program ``source`` (a path, or a list of the paths
    of its files) for the emulator, compiled unless cached. ``includes``: folders for
    ``#include``; ``defines``: ``NAME`` or ``NAME=VALUE``; ``log``: where the build's
    one line goes (by default the ``attnbook`` logger, see
    :func:`~attnbook.toolchain.compile.report_build`)."""
    paths = [pathlib.Path(source)] if isinstance(source, (str, os.PathLike)) else \
        [pathlib.Path(s) for s in source]
    if not paths:
        raise ValueError("a program needs at least one source file")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"no program {str(path)!r}")
    if len({p.name for p in paths}) < len(paths):
        raise ValueError("two source files have one file name")
    if not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise ValueError(f"arch must look like 'sm_80', got {arch!r}")
    folders = [*dict.fromkeys(p.parent for p in paths), *map(pathlib.Path, includes),
               pathlib.Path.cwd()]
    texts = {path.name: path.read_text() for path in paths}
    units = {}   # file name -> the C++ compiled for it
    for file_name, text in texts.items():
        try:
            code = ptx.to_cpp(emulate.to_cpp(emulate.inline_headers(text, file_name,
                                                                    folders)))
        except SyntaxError as e:
            raise CompileError(f"{file_name}: {e}") from None
        units[file_name] = (f'#include "cuda_emulator.h"\n#line 1 "{file_name}"\n'
                            f'{code}\n#include "emu_program.h"\n')
    flags = ["-std=c++20", *_FLAGS, "-DATTNBOOK_PROGRAM",
             f"-DATTNBOOK_EMU_ARCH={arch_number(arch)}",
             *(f"-D{d}" for d in defines),
             *(f"-I{p}" for p in (EMULATOR_DIR, INCLUDE_DIR, *folders)),
             *(f"-I{p}" for p in cpp_extension.include_paths())]
    libraries = ["-lpthread", "-ldl"]
    if sanitize:   # the checked build reports torch's allocations through c10
        lib = cpp_extension.library_paths()[0]
        flags += [*CHECKED_FLAGS, "-DATTNBOOK_PROGRAM_CHECKS=11"]
        libraries = [f"-L{lib}", "-lc10", f"-Wl,-rpath,{lib}", *libraries]
    key = hashlib.sha256("\0".join([*units, *units.values(), *flags, *libraries,
                                    torch.__version__, *emulator_headers()]).encode()
                         ).hexdigest()[:12]
    name = re.sub(r"\W", "_", paths[0].stem)
    full = f"program_{name}_{'checked' if sanitize else 'emulator'}_{key}"
    folder = build_directory(full, verbose)
    exe = folder / name
    start = time.perf_counter()
    with build_lock(full, verbose), build_progress(
            name + (" (checked)" if sanitize else ""), EMULATOR_TARGET, folder,
            exe.is_file()) as progress:
        if not exe.is_file():
            files = []
            for file_name, cpp in units.items():   # a.cu as a.cu.cpp: C++
                files.append(folder / f"{file_name}.cpp")
                files[-1].write_text(cpp)
            command = [os.environ.get("CXX", "c++"), *flags, *map(str, files), "-o",
                       str(exe), *libraries]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                named = [n for n in texts if re.search(re.escape(n) + r"[:(]\d+",
                                                       done.stderr)]
                where = named[0] if named else paths[0].name
                raise CompileError(f"compiling {where} failed:\n"
                                   + short_error(done.stderr, texts[where], where))
    report_build(name, sanitize, EMULATOR_TARGET, time.perf_counter() - start, log,
                 progress)
    return exe


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
        prog="python -m attnbook.toolchain.program",
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
