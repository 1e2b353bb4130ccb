"""``python -m attnbook.bench 02 03 …``: run chapters' benchmark suites on a GPU and
record their results (every suite when no chapter is named). An entry point above the
layers: chapter 10's suite comes from :mod:`attnbook.models`."""
import sys

from ..models import ALL_SUITES
from .suites import main

main(sys.argv[1:], ALL_SUITES)
