"""What the package prints fits the book's text column: 88 characters, as its code."""
import textwrap

WIDTH = 88


def wrap(text: str, indent: str = "  ") -> str:
    """``text`` with each line longer than :data:`WIDTH` broken between words (never
    inside one: a path or a number stays whole); a line's continuations keep its own
    indentation plus ``indent``."""
    out = []
    for line in text.split("\n"):
        lead = line[:len(line) - len(line.lstrip(" "))]
        out.append(line if len(line) <= WIDTH else textwrap.fill(
            line, WIDTH, subsequent_indent=lead + indent, break_long_words=False,
            break_on_hyphens=False))
    return "\n".join(out)
