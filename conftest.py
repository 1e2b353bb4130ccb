"""With pytest-xdist (``pytest -n auto``; pyproject sets ``--dist loadgroup``) the cells
of one notebook run on one worker, in order, since they share that notebook's kernel;
the unit tests spread over the workers one by one."""
import pytest


@pytest.hookimpl(tryfirst=True)   # before xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.xdist_group(item.path.name))
