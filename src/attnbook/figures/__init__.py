"""Plots, interactive widgets with static twins, and source listings for the book."""
from . import decoding, plots, widgets
from .show import show_kernel, show_source
from . import diagrams
