"""What the package prints wraps to the book's 88-column text column."""
from attnbook.toolchain import WIDTH, wrap


def test_wrap_breaks_long_lines_between_words_and_indents_their_continuations():
    words = " ".join(f"word{i}" for i in range(40))
    text = wrap(f"short\n  {words}\n" + "a" * 100)
    lines = text.splitlines()
    assert lines[0] == "short"
    assert all(len(line) <= WIDTH for line in lines[1:-1])
    assert all(line.startswith("    word") for line in lines[2:-1])   # 2 + 2 more
    assert " ".join(text.split()[1:-1]) == words                       # nothing lost
    assert lines[-1] == "a" * 100                    # a word longer than a line: whole
    assert wrap("x" * WIDTH) == "x" * WIDTH
