"""``python -m attnbook.bench 02 03 …``: run chapters' benchmark suites on a GPU and
record their results (every suite when no chapter is named)."""
import sys

from .suites import main

main(sys.argv[1:])
