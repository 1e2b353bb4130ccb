"""Plots, interactive widgets with static twins, and source listings for the book.

The source listings import nothing heavy; the plotting modules (matplotlib) are
imported on first use: ``ab.figures.plots``, ``from attnbook.figures import
diagrams``."""
import importlib

from .show import show_kernel, show_profiled, show_source

_PLOTTING = ("decoding", "diagrams", "generation", "plots", "widgets")


def __getattr__(name):
    if name in _PLOTTING:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
