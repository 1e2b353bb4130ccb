"""What a GPU can prove about the book, in stages that each fit a ten-minute command.

    python -m attnbook.gpu --dry-run            # the stages, their commands and times
    python -m attnbook.gpu --within 540         # the next stages that fit in 540 s
    python -m attnbook.gpu tests sanitize       # these stages

Run from a checkout (the stages use ``tests/`` and ``book/``). Everything is written
under one folder (``--out``, by default ``build/gpu/run``), with ``summary.json``
naming each stage's result, so a short-lived machine can run the stages over several
commands and send the folder back. Not imported by ``import attnbook``: a developer's
tool, not the book's code.
"""
