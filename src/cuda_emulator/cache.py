"""The extension cache (``$TORCH_EXTENSIONS_DIR``): each build's folder and the key
that names it, a lock on it that a killed build does not leave behind, and a quiet
builder. Every build goes through it: the emulator's (its guard library, kernels, whole
extensions, programs) and those of the package above it (nvcc's, ptxas reports)."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import pathlib
import warnings

__all__ = ["build_directory", "build_lock", "cache_key", "quiet_build",
           "cpp_extension", "LINK_FLAGS"]

# Every extension links the shared libstdc++ by name, ahead of the -lstdc++ the
# compiler adds. Where the linker finds libstdc++.a first, -lstdc++ alone copies a
# second libstdc++, whose locale is never set up, into the extension: a number streamed
# into an error message (TORCH_CHECK(ok, "got ", n)) prints nothing (GCC 12) or crashes
# the process (GCC 13; the lent H200's extensions held libstdc++'s own code). Named
# first, the shared library resolves every symbol and the archive adds none. (A build
# made without it is relinked: ninja reruns a step whose command line changed.)
# A tuple, handed to each build as a new list: torch's builder appends its own
# libraries to the list it is given, and a shared list that grew changed every later
# build's command line in this process (a rebuild in place, under other processes
# that had the library loaded).
LINK_FLAGS = ("-l:libstdc++.so.6",)


class _Quiet(logging.Filter):
    """Drops torch's "No CUDA runtime is found, using CUDA_HOME=..." (logged when a
    CUDA build of torch, which pip installs by default on Linux, is imported on a
    machine without a GPU: there the emulator runs the kernels, so it is no news) and,
    during a build, the extension builder's other warnings (its errors become
    CompileError)."""

    building = False

    def filter(self, record):
        if self.building and record.levelno < logging.ERROR:
            return False
        return not record.getMessage().startswith("No CUDA runtime is found")


_QUIET = _Quiet()
logging.getLogger("torch.utils.cpp_extension").addFilter(_QUIET)
from torch.utils import cpp_extension  # noqa: E402  (after the filter, once)


@contextlib.contextmanager
def quiet_build(verbose: bool = False):
    """No warning of the compiler or of torch's extension builder reaches the reader
    (a notebook's stderr is an output nbval compares); ``verbose`` lets them through."""
    if verbose:
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _QUIET.building = True
        try:
            yield
        finally:
            _QUIET.building = False


def cache_key(*parts) -> str:
    """The key of a build in the cache: 12 hex digits of everything that makes it."""
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:12]


def build_directory(full_name: str, verbose: bool = False) -> pathlib.Path:
    """The extension's folder in torch's extension cache (``$TORCH_EXTENSIONS_DIR``)."""
    return pathlib.Path(cpp_extension._get_build_directory(full_name, verbose))


@contextlib.contextmanager
def build_lock(full_name: str, verbose: bool):
    """Hold the extension's build to this process. torch's own lock (a file ``lock``
    in the build folder) stays behind when a build is killed (a notebook restarted
    mid-build), and the next build of that extension would wait for it forever: an
    ``flock``, which the system drops with its process, guards the build instead, and
    a ``lock`` file found while holding it is such a leftover."""
    folder = build_directory(full_name, verbose)
    with open(folder / "build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            (folder / "lock").unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
