"""The cells of a notebook share one Jupyter kernel, so under pytest-xdist (``-n``) each
notebook must run whole, in order, on one worker. xdist's ``--dist loadfile`` does
exactly that (a notebook is a file; its cells are that file's tests): it is the default
here when ``-n`` is given without ``--dist``, and a ``--dist`` that may split a
notebook is refused when notebooks are tested. Without xdist, or with ``-p no:xdist``,
nothing changes."""
import os
import sys

import pytest

# --dist modes that keep every test of one file on one worker
WHOLE_FILES = ("no", "loadfile")


@pytest.hookimpl(tryfirst=True)   # before xdist turns -n into --dist load
def pytest_cmdline_main(config):
    option = config.option
    if not getattr(option, "numprocesses", None):
        return   # no xdist, or no -n
    if option.dist == "no":
        option.dist = "loadfile"
    elif option.dist not in WHOLE_FILES and (getattr(option, "nbval", False)
                                             or getattr(option, "nbval_lax", False)):
        raise pytest.UsageError(
            f"--dist {option.dist} would spread a notebook's cells over several "
            "workers (each worker has its own Jupyter kernel): use --dist loadfile, "
            "or leave --dist out")


def pytest_configure(config):
    """No line while an extension compiles (attnbook.toolchain.progress): the
    notebooks' stored outputs were made with every build cached. Each xdist worker,
    and the Jupyter kernels it starts, takes its share of the cores. Several processes
    with a thread per core each oversubscribe the machine, and OpenMP threads that
    spin at a barrier while a core runs another process's thread made a training cell
    ten times slower."""
    os.environ.setdefault("ATTNBOOK_BUILD_PROGRESS", "0")
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    share = str(max(1, (os.cpu_count() or 1) // int(workers)))
    for variable in ("OMP_NUM_THREADS", "ATTNBOOK_EMU_WORKERS"):
        os.environ.setdefault(variable, share)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
