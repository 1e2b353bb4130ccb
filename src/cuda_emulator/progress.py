"""What a reader sees while an extension compiles: a build that is not in the cache yet
takes from seconds to minutes (two minutes for some of the book's kernels on a two-core
machine, a minute for nvcc's tensor-core builds), so while it runs one line says what
compiles, for which target, and how long the same build took last time on this machine
where it has run before. When it is done the line becomes ``compiled … in N s``.

The line is shown where someone watches: in a Jupyter cell (a display that is updated
in place) or on a terminal's stderr (rewritten with a carriage return). Output that
goes to a file or a pipe gets the old behaviour alone, the finished line
(:func:`~cuda_emulator.build.report_build`), and ``ATTNBOOK_BUILD_PROGRESS=0``
turns the line off (the notebooks' test run sets it: a notebook's stored outputs were
made with the builds cached, so they hold no build line). A build found in the cache
shows nothing."""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sys
import time

__all__ = ["build_progress", "watched", "last_seconds"]

_TIMES = "attnbook_build_seconds.json"   # in the extension cache's root


def watched() -> bool:
    """True where a person sees the output: a Jupyter kernel, or stderr a terminal."""
    if os.environ.get("ATTNBOOK_BUILD_PROGRESS", "1") == "0":
        return False
    return _in_jupyter() or sys.stderr.isatty()


def _in_jupyter() -> bool:
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return bool(shell) and "IPKernelApp" in shell.config


def _times_file(folder: pathlib.Path) -> pathlib.Path:
    return folder.parent / _TIMES   # folder: the build's own, in the cache's root


def last_seconds(folder: pathlib.Path, what: str) -> float | None:
    """How long the last build of ``what`` (a name and a target) took on this
    machine, from the extension cache's record; None if it has never been built."""
    try:
        return json.loads(_times_file(folder).read_text()).get(what)
    except (OSError, ValueError):
        return None


def _remember(folder: pathlib.Path, what: str, seconds: float) -> None:
    path = _times_file(folder)
    try:
        times = json.loads(path.read_text()) if path.exists() else {}
        times[what] = round(seconds, 1)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(times, indent=0, sort_keys=True))
        tmp.replace(path)   # atomic: builds in other processes read a whole file
    except (OSError, ValueError):
        pass   # a read-only cache only loses the estimate


class _Line:
    """One line of text as a Jupyter display (its repr is the text)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self):
        return self.text


@contextlib.contextmanager
def build_progress(name: str, target: str, folder: pathlib.Path, cached: bool):
    """Around a build of ``name`` for ``target`` in the extension-cache ``folder``:
    unless it is ``cached``, the line described above where :func:`watched`, and its
    time kept for the next estimate. Yields a callback that takes the finished line
    and returns True where it replaced the progress line (the caller then prints
    nothing more)."""
    what = f"{name} for {target}"
    if cached:
        yield lambda line: False
        return
    done = _show(what, last_seconds(folder, what)) if watched() else (
        lambda line: False)
    start = time.perf_counter()
    try:
        yield done
    except BaseException:
        done(f"compiling {what} failed")
        raise
    _remember(folder, what, time.perf_counter() - start)


def _show(what: str, before: float | None):
    """Show the line for a build of ``what``; returns the callback that replaces it."""
    text = (f"compiling {what}: its first use here"
            + (f", about {before:.0f} s as last time…" if before else
               "; later uses load it from the cache…"))
    if _in_jupyter():
        from IPython.display import display
        handle = display(_Line(text), display_id=True)

        def done(line):
            handle.update(_Line(line))
            return True
        return done
    sys.stderr.write(text)
    sys.stderr.flush()

    def done(line):
        sys.stderr.write("\r" + line.ljust(len(text)) + "\n")
        return True
    return done
