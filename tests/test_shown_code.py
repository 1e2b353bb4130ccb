"""The book shows the kernel code it relies on: each ``ab.show_kernel`` call names
declarations (functions, structs, constants) that exist and shows each whole, and every
package declaration that a shown one uses is shown in the same chapter or an earlier one
(or, for the few listed below, in the chapter that teaches it)."""
import ast
import json
import pathlib
import re

import pytest

from attnbook.figures.show import declarations, show_kernel
from attnbook.toolchain.compile import KERNEL_DIR
from cuda_emulator.emulate import blank_out

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))   # in the book's order

# Used before the chapter that teaches it: name -> that chapter's notebook prefix.
TAUGHT_LATER = {"softmax_rows_naive": "03"}   # chapter 2's launcher calls it


def calls(notebook: pathlib.Path) -> list[tuple[str, tuple[str, ...]]]:
    """(file, names) of each show_kernel call in the notebook's code cells."""
    found = []
    for cell in json.loads(notebook.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or "show_kernel" not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(
                    node.func, "attr", getattr(node.func, "id", None)) == "show_kernel":
                file, *names = (ast.literal_eval(a) for a in node.args)
                found.append((file, tuple(names)))
    return found


def table(file: str) -> dict[str, str]:
    """Each declaration of a kernel file: its text."""
    text = (KERNEL_DIR / file).read_text()
    lines = text.splitlines()
    return {name: "\n".join("\n".join(lines[a:b + 1]) for a, b in spans)
            for name, spans in declarations(text).items()}


def included(file: str, seen: list[str] | None = None) -> list[str]:
    """``file`` and the package headers it includes, transitively."""
    seen = [] if seen is None else seen
    if file not in seen and (KERNEL_DIR / file).is_file():
        seen.append(file)
        text = (KERNEL_DIR / file).read_text()
        for header in re.findall(r'#include "([^"]+)"', text):
            included(header, seen)
    return seen


def used(file: str, name: str) -> set[tuple[str, str]]:
    """The package declarations the declaration ``name`` of ``file`` uses: names it
    mentions (outside comments) that ``file`` or a header it includes declares."""
    words = set(re.findall(r"\w+", blank_out(table(file)[name], strings=True)))
    return {(f, n) for f in included(file) for n in table(f)
            if n in words and n != name}


def shown_by(notebook) -> set[tuple[str, str]]:
    return {(file, n) for file, names in calls(notebook)
            for n in (names or table(file))}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_shown_declaration_exists_and_is_whole(notebook):
    for file, names in calls(notebook):
        text = str(show_kernel(file, *names))   # KeyError for a name not declared
        masked = blank_out(text, strings=True)
        for opening, closing in ("{}", "()", "[]"):
            assert masked.count(opening) == masked.count(closing), (file, names)
        assert masked.rstrip()[-1:] in "};" or masked.lstrip().startswith(
            "#define") or not names, (file, names)


def test_a_chapter_shows_what_its_kernels_rely_on():
    shown = set()
    missing = []
    for notebook in NOTEBOOKS:
        shown |= shown_by(notebook)
        for file, name in sorted(shown_by(notebook)):
            for f, n in sorted(used(file, name) - shown):
                if TAUGHT_LATER.get(n, "") > notebook.name[:2]:
                    continue
                missing.append(f"{notebook.stem}: {name} ({file}) uses {n} ({f})")
    assert not missing, "\n".join(missing)
    for name, chapter in TAUGHT_LATER.items():   # and those are taught where listed
        teacher = next(p for p in NOTEBOOKS if p.name.startswith(chapter))
        assert any(n == name for _, n in shown_by(teacher)), name


def test_the_check_finds_a_helper_no_chapter_shows():
    # chapter 3's first kernel calls max_nan; a book without max_nan.cuh's cell fails
    assert ("max_nan.cuh", "max_nan") in used("softmax.cuh", "softmax_rows_naive")
    chapter3 = next(p for p in NOTEBOOKS if p.name.startswith("03"))
    assert ("max_nan.cuh", "max_nan") in shown_by(chapter3)


def test_a_profile_s_lines_are_shown_with_their_code():
    """Each line a profile counted, in the package's kernel files, after its number
    (as the profile prints it), each file's name above; a notebook's own file is left
    out."""
    from attnbook.figures.show import show_profiled
    from cuda_emulator.sanitizer import LaunchProfile, LineCounts
    text = (KERNEL_DIR / "softmax.cuh").read_text().splitlines()
    n = next(i for i, line in enumerate(text, 1) if "s = fold(s, xr[j])" in line)
    launch = LaunchProfile("k", (1, 1, 1), (32, 1, 1), 0, 0, [
        LineCounts(f"softmax.cuh:{n}", "global", "load"),
        LineCounts(f"softmax.cuh:{n}", "shared", "load"),
        LineCounts("cell.cu:3", "global", "store")])
    assert show_profiled(launch).text.splitlines() == [
        "// softmax.cuh", f"{n:>4}  {text[n - 1].strip()}"]
