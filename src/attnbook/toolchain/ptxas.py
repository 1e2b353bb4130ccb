"""What ptxas says about a kernel: registers, spills, shared memory and stack per
kernel, from an nvcc compile that needs no GPU."""
from __future__ import annotations

import fcntl
import functools
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

from cuda_emulator.build import CompileError, short_error
from cuda_emulator.cache import build_directory, cache_key, cpp_extension
from .compile import KERNEL_DIR, kernel_file_name

__all__ = ["ptxas_report", "find_nvcc", "cached_report", "nvcc_compile",
           "demangle", "kept_cubin"]


def find_nvcc() -> str | None:
    """Path of nvcc, or None where the CUDA toolkit is absent."""
    home = cpp_extension.CUDA_HOME
    for cand in ([os.path.join(home, "bin", "nvcc")] if home else []) + \
            [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]:
        if cand and os.path.exists(cand):
            return cand
    return None


def ptxas_report(cuda: str, arch: str = "sm_80") -> dict:
    """Compile ``cuda`` with nvcc for ``arch`` (compile only, no GPU needed; host code
    too, as a real build does) and return what ptxas reports per kernel:
    ``{kernel: {"registers", "spill_stores", "spill_loads", "shared_bytes",
    "stack_bytes"}}``. Raises CompileError if it does not compile. Reports are kept in
    the extension cache, keyed by the text, every header and kernel file of
    ``attnbook/kernels`` (which it may include), the architecture and nvcc's
    version."""
    return cached_report("ptxas_reports", cuda, arch, _report)


def cached_report(kind: str, cuda: str, arch: str, make) -> dict:
    """``make(nvcc, cuda, arch)``, a JSON-able report of an nvcc compile, kept in the
    extension cache's folder ``kind`` under a key of the text, every header and kernel
    file of ``attnbook/kernels`` (which it may include), the architecture and nvcc's
    version."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError(f"{kind} need nvcc (the CUDA toolkit), which this machine "
                           "lacks")
    cached = build_directory(kind) / f"{_key(nvcc, cuda, arch)}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    # one compile per key: a second process (a test worker, a notebook) that wants the
    # same report waits for it instead of compiling it again; the system drops the lock
    # with a killed process
    with open(cached.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cached.is_file():
            return json.loads(cached.read_text())
        report = make(nvcc, cuda, arch)
        partial = cached.with_suffix(f".{os.getpid()}")   # readers see all or none
        partial.write_text(json.dumps(report))
        os.replace(partial, cached)
    return report


def nvcc_compile(nvcc: str, cuda: str, arch: str, out: str, *flags: str) -> str:
    """Compile ``cuda`` (a kernel file's text, or a cell's) for ``arch`` into ``out``
    as the package's builds do (-O3, C++17, the kernels' folder on the include path),
    to an object file unless ``flags`` name another phase (``-cubin``); returns nvcc's
    messages. Raises CompileError if it does not compile."""
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / kernel_file_name(cuda)
        src.write_text(cuda)
        phase = [] if "-cubin" in flags else ["-c"]
        # -arch=sm_90a also emits compute_90's PTX, which refuses sm_90a's wgmma
        target = (f"-gencode=arch=compute_{arch[3:]},code={arch}" if arch.endswith("a")
                  else f"-arch={arch}")
        cmd = [nvcc, *phase, target, "-O3", "-std=c++17", *flags,
               f"-I{KERNEL_DIR}", "-o", out, str(src)]
        run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise CompileError(f"nvcc {target} failed:\n"
                           f"{short_error(run.stderr + run.stdout)}")
    return run.stderr


def _key(nvcc: str, cuda: str, arch: str) -> str:
    return cache_key(cuda, arch, _version(nvcc), *(p.read_text() for p in sorted(
        KERNEL_DIR.iterdir()) if p.suffix in (".cu", ".cuh", ".h")))


def _kept(nvcc: str, cuda: str, arch: str) -> pathlib.Path:
    return build_directory("cubins") / f"{_key(nvcc, cuda, arch)}.cubin"


def kept_cubin(cuda: str, arch: str) -> pathlib.Path | None:
    """The cubin of :func:`ptxas_report`'s compile of ``cuda`` for ``arch`` (the SASS
    readers disassemble it instead of compiling again), or None where that compile
    kept none (a report cached by an older release)."""
    ptxas_report(cuda, arch)
    kept = _kept(find_nvcc(), cuda, arch)
    return kept if kept.is_file() else None


@functools.cache
def _version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout


def _report(nvcc: str, cuda: str, arch: str) -> dict:
    with tempfile.TemporaryDirectory() as keep:   # nvcc's intermediates: the cubin
        messages = nvcc_compile(nvcc, cuda, arch, os.devnull, "-Xptxas=-v", "--keep",
                                f"--keep-dir={keep}")
        cubins = list(pathlib.Path(keep).glob("*.cubin"))
        if len(cubins) == 1:
            kept = _kept(nvcc, cuda, arch)
            partial = kept.with_suffix(f".{os.getpid()}")
            shutil.copyfile(cubins[0], partial)
            os.replace(partial, kept)
    report, current = {}, None
    for line in messages.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?(\w+)'?",
                      line)
        if m:
            current = report.setdefault(demangle(m.group(1)), {"shared_bytes": 0})
            continue
        if current is None:
            continue
        for key, pattern in [("stack_bytes", r"(\d+) bytes stack frame"),
                             ("spill_stores", r"(\d+) bytes spill stores"),
                             ("spill_loads", r"(\d+) bytes spill loads"),
                             ("registers", r"Used (\d+) registers"),
                             ("shared_bytes", r"(\d+) bytes smem")]:
            m = re.search(pattern, line)
            if m:
                current[key] = int(m.group(1))
    return {k: v for k, v in report.items() if "registers" in v}


def demangle(symbol: str) -> str:
    filt = shutil.which("c++filt")
    if not filt or not symbol.startswith("_Z"):
        return symbol
    return (subprocess.run([filt, symbol], capture_output=True, text=True)
            .stdout.strip() or symbol)
