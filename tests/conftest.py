"""Devices for the tests of the package's ops and kernels.

A test that takes the ``device`` argument runs once per device: ``"cpu"`` (the kernels
on the CPU emulator) always, ``"cuda"`` (the same kernels built by nvcc) where torch
sees a GPU, with the same cases and tolerances. ``ATTNBOOK_TEST_DEVICES=cuda`` (or
``cpu``, or ``cpu,cuda``) picks the devices; naming one that is not there is an error,
not a silent skip. Each such test is marked with its device (``-m cuda`` selects the
GPU half). A check that only means something on a GPU (a timing, the caching
allocator's peak) is marked ``gpu`` and reported as skipped where there is none.

The property tests (``test_properties.py``) run Hypothesis's "ci" profile by default: a
fixed budget of draws, derandomized, so that a run's time and verdict do not vary;
``--hypothesis-profile=long`` draws many more, afresh, and remembers failing ones.
"""
import os
import pathlib
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(pathlib.Path(__file__).parent))

KNOWN = ("cpu", "cuda")


def test_devices() -> list:
    """The devices the ``device`` argument takes, in order."""
    present = [d for d in KNOWN if d == "cpu" or torch.cuda.is_available()]
    chosen = os.environ.get("ATTNBOOK_TEST_DEVICES", "").strip()
    if not chosen:
        return present
    wanted = [d.strip() for d in chosen.split(",") if d.strip()]
    for d in wanted:
        if d not in KNOWN:
            raise pytest.UsageError(f"ATTNBOOK_TEST_DEVICES: {d!r} is not one of "
                                    f"{KNOWN}")
        if d not in present:
            raise pytest.UsageError(f"ATTNBOOK_TEST_DEVICES names {d!r}, but torch "
                                    "sees no CUDA device here")
    return wanted


test_devices.__test__ = False   # a helper, not a test

settings.register_profile("ci", max_examples=100, derandomize=True, deadline=None,
                          database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=1000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu: the test's device argument is the CPU "
                            "(the emulator)")
    config.addinivalue_line("markers", "cuda: the test's device argument is a GPU")
    config.addinivalue_line("markers", "gpu: a check that needs a GPU by nature "
                            "(timing, the caching allocator); skipped without one")
    config.addinivalue_line("markers", "stack_independent: its outcome is the kernel's "
                            "and the emulator's alone (grids past CUDA's limits, the "
                            "sanitizers, a ring's wrap, the context switch), whatever "
                            "the Python stack: "
                            "CI's colab job leaves it to the main job")


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", [pytest.param(d, marks=getattr(pytest.mark, d))
                                        for d in test_devices()])


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a GPU: torch sees no CUDA device here")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
