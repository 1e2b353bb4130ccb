"""Show source code in a notebook: rendered as a highlighted block in Jupyter and in the
book."""
from __future__ import annotations

from ..toolchain.compile import kernel_source

__all__ = ["show_kernel", "show_source"]


class _Code:
    def __init__(self, text: str, language: str):
        self.text, self.language = text, language

    def _repr_markdown_(self):
        return f"```{self.language}\n{self.text.rstrip()}\n```"

    def __repr__(self):
        return self.text


def show_kernel(filename: str, start: str | None = None, end: str | None = None):
    """The kernel file ``filename`` (or the lines from the one containing ``start`` up
    to the one before ``end``), for display."""
    text = kernel_source(filename)
    if start is not None:
        lines = text.splitlines()
        i = next(n for n, ln in enumerate(lines) if start in ln)
        j = next((n for n, ln in enumerate(lines[i + 1:], i + 1) if end and end in ln),
                 len(lines))
        text = "\n".join(lines[i:j])
    return _Code(text, "cuda")


def show_source(obj):
    """The Python source of a function of the package, for display."""
    import inspect
    return _Code(inspect.getsource(obj), "python")
