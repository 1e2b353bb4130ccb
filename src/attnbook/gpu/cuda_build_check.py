"""Build every extension of the package and of the notebooks with the CUDA back end, for
each architecture the book targets, on a machine without a GPU.

    python -m attnbook.gpu.cuda_build_check [--arch sm_75 sm_80 sm_90]
                                                  [--no-notebooks]

It needs a CUDA build of torch and the CUDA toolkit (``CUDA_HOME``), but no GPU: this is
the check to run after touching a wrapper, ``attnbook_torch.h`` or the build. The
notebooks' extensions are found by running each notebook with :func:`compile` replaced
by a recorder (cells that use a recorded module then fail, which is expected and
ignored), and every dict of ``load_inline`` arguments a notebook defines
(a plain ``load_inline`` example, which a notebook without a GPU only shows) is built
with ``load_inline`` itself. Prints the build time of each extension and exits non-zero
if any build fails.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

from ..toolchain.compile import CompileError, arch_list, compile, kernel_source

ARCHS = ("sm_75", "sm_80", "sm_90")
BOOK = pathlib.Path(__file__).resolve().parents[3] / "book"

# Run as the first cell of a notebook: every compile() call is recorded, not built.
_RECORDER = r"""
import json, attnbook as ab, attnbook.toolchain.compile as c
def _record(name, cuda, wrapper, functions, **kw):
    with open({path!r}, "a") as f:
        f.write(json.dumps([name, cuda, wrapper,
                            list([functions] if isinstance(functions, str)
                                 else functions)]) + "\n")
    raise RuntimeError("recorded for the CUDA build check")
ab.compile = ab.toolchain.compile = c.compile = _record
"""
# Run as the last cell: the load_inline examples the notebook defined.
_PLAIN = r"""
with open({path!r}, "a") as f:
    for _value in list(globals().values()):
        if isinstance(_value, dict) and {{"name", "cuda_sources"}} <= _value.keys():
            f.write(json.dumps(["load_inline", _value]) + "\n")
"""


def package_extensions():
    from ..ops.registry import EXTENSIONS
    return [[e.name, kernel_source(e.kernel), kernel_source(e.wrapper), e.functions]
            for e in EXTENSIONS]


def notebook_extensions(notebooks):
    """(name, cuda, wrapper, functions) of every compile() call the notebooks make, and
    ("load_inline", arguments) of every load_inline example they define."""
    import nbformat
    from nbclient import NotebookClient
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        record = pathlib.Path(tmp) / "calls.jsonl"
        for path in notebooks:
            nb = nbformat.read(path, as_version=4)
            nb.cells.insert(0, nbformat.v4.new_code_cell(
                _RECORDER.format(path=str(record))))
            nb.cells.append(nbformat.v4.new_code_cell(_PLAIN.format(path=str(record))))
            NotebookClient(nb, timeout=600, allow_errors=True,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        if record.exists():
            found = [json.loads(line) for line in record.read_text().splitlines()]
    unique = {json.dumps(call): call for call in found}
    return list(unique.values())


def build(call, arch) -> None:
    """Build one recorded extension for ``arch``; raises CompileError if it fails."""
    if call[0] != "load_inline":
        name, cuda, wrapper, functions = call
        compile(name, cuda, wrapper, functions, backend="cuda", arch=arch)
        return
    import os
    from torch.utils.cpp_extension import load_inline
    args = dict(call[1], name=f"{call[1]['name']}_{arch}")
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list(arch)
    try:
        load_inline(**args)
    except (RuntimeError, ImportError) as e:
        raise CompileError(str(e)[-3000:]) from None


def _compiles_on_the_emulator(call) -> bool:
    """A notebook's compile() call whose text the emulator rejects too is an example of
    a compile error, shown on purpose (a notebook that fails by accident fails its
    tests)."""
    if call[0] == "load_inline":
        return True
    try:
        compile(*call, backend="emulator")
        return True
    except CompileError:
        print(f"{call[0]}: skipped, it does not compile on the emulator either "
              "(an example of a compile error)")
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", nargs="+", default=list(ARCHS))
    parser.add_argument("--no-notebooks", action="store_true")
    args = parser.parse_args(argv)
    import torch
    if torch.version.cuda is None:
        print("this torch is a CPU build: the check needs a CUDA build of torch "
              "(docs/developing.md's 'Contributing' section says how to get one)")
        return 2
    extensions = package_extensions()
    if not args.no_notebooks:
        extensions += [call
                       for call in notebook_extensions(sorted(BOOK.glob("*.ipynb")))
                       if _compiles_on_the_emulator(call)]
    failures = 0
    for arch in args.arch:
        for call in extensions:
            name = call[1]["name"] if call[0] == "load_inline" else call[0]
            start = time.perf_counter()
            try:
                build(call, arch)
                verdict = "ok"
            except CompileError as e:
                failures += 1
                verdict = f"FAILED\n{e}"
            print(f"{arch} {name}: {time.perf_counter() - start:.1f} s {verdict}",
                  flush=True)
    print(f"{len(extensions)} extensions × {len(args.arch)} architectures, "
          f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
