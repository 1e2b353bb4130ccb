"""Build every extension of the package and of the notebooks with the CUDA back end, for
each architecture the book targets, on a machine without a GPU.

    python -m attnbook.toolchain.cuda_build_check [--arch sm_75 sm_80 sm_90] [--no-notebooks]

It needs a CUDA build of torch and the CUDA toolkit (``CUDA_HOME``), but no GPU: this is the
check to run after touching a wrapper, ``attnbook_torch.h`` or the build. The notebooks'
extensions are found by running each notebook with :func:`compile` replaced by a recorder
(cells that use a recorded module then fail, which is expected and ignored). Prints the
build time of each extension and exits non-zero if any build fails.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

from .compile import CompileError, compile, kernel_source

ARCHS = ("sm_75", "sm_80", "sm_90")
BOOK = pathlib.Path(__file__).resolve().parents[3] / "book"

# Run as the first cell of a notebook: every compile() call is recorded, not built.
_RECORDER = r"""
import json, attnbook as ab, attnbook.toolchain.compile as c
def _record(name, cuda, wrapper, functions, **kw):
    with open({path!r}, "a") as f:
        f.write(json.dumps([name, cuda, wrapper, list([functions] if isinstance(functions, str)
                                                       else functions)]) + "\n")
    raise RuntimeError("recorded for the CUDA build check")
ab.compile = ab.toolchain.compile = c.compile = _record
"""


def package_extensions():
    from ..ops import EXTENSIONS
    return [(name, kernel_source(filename), wrapper, functions)
            for name, filename, wrapper, functions in EXTENSIONS]


def notebook_extensions(notebooks):
    """(name, cuda, wrapper, functions) of every compile() call the notebooks make."""
    import nbformat
    from nbclient import NotebookClient
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        record = pathlib.Path(tmp) / "calls.jsonl"
        for path in notebooks:
            nb = nbformat.read(path, as_version=4)
            nb.cells.insert(0, nbformat.v4.new_code_cell(_RECORDER.format(path=str(record))))
            NotebookClient(nb, timeout=600, allow_errors=True,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        if record.exists():
            found = [tuple(json.loads(line)) for line in record.read_text().splitlines()]
    unique = {(n, c, w, tuple(f)): None for n, c, w, f in found}
    return [(n, c, w, list(f)) for n, c, w, f in unique]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", nargs="+", default=list(ARCHS))
    parser.add_argument("--no-notebooks", action="store_true")
    args = parser.parse_args(argv)
    import torch
    if torch.version.cuda is None:
        print("this torch is a CPU build: install a CUDA build of torch (DEVELOPERS: README, "
              "'Contributing') to check the CUDA back end")
        return 2
    extensions = package_extensions()
    if not args.no_notebooks:
        extensions += notebook_extensions(sorted(BOOK.glob("*.ipynb")))
    failures = 0
    for arch in args.arch:
        for name, cuda, wrapper, functions in extensions:
            start = time.perf_counter()
            try:
                compile(name, cuda, wrapper, functions, backend="cuda", arch=arch)
                verdict = "ok"
            except CompileError as e:
                failures += 1
                verdict = f"FAILED\n{e}"
            print(f"{arch} {name}: {time.perf_counter() - start:.1f} s {verdict}", flush=True)
    print(f"{len(extensions)} extensions × {len(args.arch)} architectures, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
