"""With pytest-xdist (``pytest -n auto``) the cells of one notebook run on one worker, in
order, since they share that notebook's kernel; the unit tests spread over the workers
one by one (xdist's ``--dist loadgroup``, made the default here)."""
import pytest


@pytest.hookimpl(tryfirst=True)   # before xdist turns -n into --dist load
def pytest_cmdline_main(config):
    if getattr(config.known_args_namespace, "dist", "no") != "no":
        return   # no xdist, or a --dist given
    if hasattr(config, "workerinput"):
        config.option.loadgroup = True   # a worker: it names each test by its group
    else:
        config.option.dist = "loadgroup"


@pytest.hookimpl(tryfirst=True)   # before xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.xdist_group(item.path.name))
