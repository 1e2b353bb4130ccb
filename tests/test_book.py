"""The book's own rules: every notebook installs from the one repository address, and is
committed executed top to bottom with its outputs."""
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import unicodedata

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def _release_check():
    spec = importlib.util.spec_from_file_location("release_check",
                                                  ROOT / ".ci" / "release_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


release = _release_check()
repository, release_tag = release.repository, release.release_tag
expected_setup_cell = release.expected_setup_cell


def code_cells(nb_path):
    return release.code_cells(json.loads(nb_path.read_text()))


def test_there_are_notebooks():
    assert NOTEBOOKS


def test_every_setup_cell_and_button_agrees_with_the_setting():
    # the offline part of the release check (.ci/release_check.py)
    assert release.setup_cell_errors() == []
    assert release.button_errors() == []


def test_setup_cell_check_catches_a_wrong_url():
    nb = NOTEBOOKS[0]
    assert expected_setup_cell(nb) != expected_setup_cell(
        nb, url="https://github.com/someone-else/attnbook")
    assert "github.com/attnbook/attnbook@" in expected_setup_cell(nb)


def _book_copy(tmp_path, url):
    """A copy of the book's setting, package version and two notebooks (one with the
    [hf] extra), its address set to ``url``."""
    (tmp_path / "book").mkdir(parents=True)
    (tmp_path / "src" / "attnbook").mkdir(parents=True)
    for name in ("book/01_attention_from_first_principles.ipynb",
                 "book/10_end_to_end.ipynb", "src/attnbook/__init__.py"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    cfg = (ROOT / "_config.yml").read_text()
    (tmp_path / "_config.yml").write_text(cfg.replace(repository(), url))
    return tmp_path


def test_the_release_check_needs_the_tag_at_the_address(tmp_path):
    remote = tmp_path / "remote"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(remote)]
    subprocess.run(["git", "init", "-q", str(remote)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "release"], check=True)
    root = _book_copy(tmp_path / "copy", f"file://{remote}")
    # the setup cells still install from the old address: named, then rewritten
    assert len(release.setup_cell_errors(root)) == 2
    nb = root / "book" / "01_attention_from_first_principles.ipynb"
    cells = json.loads(nb.read_text())
    release.code_cells(cells)[0]["metadata"]["tags"] = []   # and one lacks its tag
    nb.write_text(json.dumps(cells))
    assert release.main([], root=root) == 1
    assert release.main(["--write"], root=root) == 1   # no tag yet at the address
    assert release.setup_cell_errors(root) == []   # sources and tag mended
    assert "has no tag v" in release.tag_errors(root)[0]
    subprocess.run([*git, "tag", release_tag()], check=True)
    assert release.main([], root=root) == 0
    cell = code_cells(root / "book" / "10_end_to_end.ipynb")[0]
    assert f'"git+file://{remote}@{release_tag()}"' in "".join(cell["source"])
    assert "attnbook[hf] @" in "".join(cell["source"])


def test_a_failed_install_says_what_to_do(tmp_path):
    # the setup cell as Colab runs it, attnbook missing and the source unreachable
    cell = expected_setup_cell(NOTEBOOKS[0])
    script = ("import importlib.util\n"
              "importlib.util.find_spec = lambda name, *args: None\n" + cell)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PIP_NO_INDEX": "1",
                               "ATTNBOOK_SOURCE": str(tmp_path / "attnbook.whl")})
    assert done.returncode == 1
    assert f"RuntimeError: pip could not install {tmp_path / 'attnbook.whl'}:" \
        in done.stderr
    assert "Upload attnbook's wheel or source folder (Files, on the left), run " \
           "os.environ['ATTNBOOK_SOURCE'] = '/content/<its name>', then this cell" \
        in done.stderr


def test_release_tag_is_the_packaged_version():
    import attnbook
    assert release_tag() == f"v{attnbook.__version__}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_executed_top_to_bottom(nb):
    cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    counts = [c["execution_count"] for c in cells]
    assert None not in counts, f"{nb.name}: unexecuted cell"
    assert counts == list(range(1, len(cells) + 1)), (f"{nb.name}: not executed top to "
                                                      "bottom once")
    for c in cells:
        for o in c["outputs"]:
            assert o["output_type"] != "error", f"{nb.name}: stored error"
            assert not (o["output_type"] == "stream" and o["name"] == "stderr"), \
                f"{nb.name}: stderr output"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_no_table_is_printed_as_text(nb):
    """A Markdown table a cell prints is monospace text in the book: tables are
    displayed (ab.bench.markdown_table, Result.table)."""
    printed = [c["source"][0] for c in code_cells(nb) for o in c["outputs"]
               if o["output_type"] == "stream" and "|---" in "".join(o["text"])]
    assert not printed, f"{nb.name}: cells print Markdown tables: {printed}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_widgets_leave_the_built_page_to_their_static_figure(nb):
    """Without a kernel a widget is a frozen snapshot, or nothing offline: the book
    drops its output (remove-output) and shows the static figure beside it."""
    for cell in code_cells(nb):
        if any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for o in cell["outputs"]):
            tags = cell["metadata"].get("tags", [])
            assert "remove-output" in tags and "nbval-ignore-output" in tags, \
                f"{nb.name}: {cell['source'][:2]}"
            assert "interactive in Colab or Jupyter" in "".join(cell["source"])


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_in_the_table_of_contents(nb):
    toc = (ROOT / "_toc.yml").read_text()
    assert f"book/{nb.stem}" in toc


def markdown_text(nb_path):
    cells = json.loads(nb_path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells
                     if c["cell_type"] == "markdown")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_control_character_in_the_text(nb):
    """A LaTeX command written in a Python string without an r prefix loses its
    backslash to an escape: "\\top" becomes a tab and "op" (chapter 11's summary)."""
    bad = sorted({repr(c) for c in markdown_text(nb)
                  if unicodedata.category(c) == "Cc" and c != "\n"})
    assert not bad, f"control characters in the markdown: {bad}"


def unset_display_math(text):
    """The $$ blocks of a markdown text that touch a line of prose: MyST typesets a
    display only as a block of its own, so "... so\\n$$x$$" prints its source inline,
    the spaces lost (chapters 8 and 12 did)."""
    lines, bad, k = text.split("\n"), [], 0
    while k < len(lines):
        if lines[k].strip().startswith("$$"):
            first, s = k, lines[k].strip()
            if not (len(s) > 4 and s.endswith("$$")):   # not a one-line block
                k += 1
                while k < len(lines) and not lines[k].strip().endswith("$$"):
                    k += 1
            if (first and lines[first - 1].strip()) or \
                    (k + 1 < len(lines) and lines[k + 1].strip()):
                bad.append(lines[first].strip()[:40])
        k += 1
    return bad


def test_unset_display_math_sees_both_sides():
    assert unset_display_math("so\n$$x$$\n\nand") == ["$$x$$"]
    assert unset_display_math("so\n\n$$\nx\n$$\nand") == ["$$"]
    assert not unset_display_math("so\n\n$$\nx\n$$\n\nand\n\n$$y$$")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_display_math_stands_as_a_block(nb):
    cells = json.loads(nb.read_text())["cells"]
    bad = [b for c in cells if c["cell_type"] == "markdown"
           for b in unset_display_math("".join(c["source"]))]
    assert not bad, f"$$ blocks without a blank line around them: {bad}"


def referenced_chapters(text):
    """Chapter numbers and appendix letters a text refers to ("chapter 7", "chapters
    2–5", "chapters 4 and 7", "appendix A")."""
    found = set()
    for m in re.finditer(r"[Cc]hapters? (\d+)(?:\s*(?:–|-|to)\s*(\d+))?"
                         r"((?:(?:, | and )\d+)*)",
                         text):
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        found |= {f"{n:02d}" for n in range(lo, hi + 1)}
        found |= {f"{int(n):02d}" for n in re.findall(r"\d+", m.group(3))}
    found |= {f"{m.group(1)}1" for m in re.finditer(r"[Aa]ppendix ([A-Z])\b", text)}
    return found


def test_cross_references_point_to_pages_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    pages = set(re.findall(r"file: book/(\w\w)_", toc))
    for path in NOTEBOOKS + [ROOT / "book" / "intro.md"]:
        text = markdown_text(path) if path.suffix == ".ipynb" else path.read_text()
        missing = referenced_chapters(text) - pages
        assert not missing, (f"{path.name} refers to pages not in the book: "
                             f"{sorted(missing)}")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_a_chapter_links_the_chapters_it_names(nb):
    """The first time a page names another chapter or appendix ("chapter 7",
    "Appendix B") outside a heading, the name links to that page."""
    pages = {p.name.split("_")[0]: p.name for p in NOTEBOOKS}
    unlinked, seen = [], set()
    for line in markdown_text(nb).splitlines():
        if line.startswith("#"):
            continue
        for m in re.finditer(r"(\[?)([Cc]hapter|[Aa]ppendix) (\d+|[AB])\b"
                             r"(\]\(([^)]+)\))?", line):
            num = m.group(3)
            key = f"{int(num):02d}" if num.isdigit() else f"{num}1"
            page = pages.get(key)
            if page is None or page == nb.name or key in seen:
                continue
            seen.add(key)
            if m.group(5) != page:
                unlinked.append(m.group(0))
    assert not unlinked, f"{nb.name}: first mentions without a link: {unlinked}"


def citations(text: str) -> set[str]:
    """The keys of the {cite}, {cite:p} and {cite:t} roles in a page's Markdown."""
    return {key.strip() for m in re.finditer(r"\{cite(?::[pt])?\}`([^`]+)`", text)
            for key in m.group(1).split(",")}


def test_every_citation_is_in_the_bibliography_and_every_entry_is_cited():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["bibtex_bibfiles"] == ["book/references.bib"]
    assert "file: book/references" in (ROOT / "_toc.yml").read_text()
    entries = set(re.findall(r"^@\w+\{(\w+),", (ROOT / "book" / "references.bib")
                             .read_text(), re.M))
    cited = set()
    for path in NOTEBOOKS + [ROOT / "book" / "intro.md"]:
        text = markdown_text(path) if path.suffix == ".ipynb" else path.read_text()
        unknown = citations(text) - entries
        assert not unknown, f"{path.name} cites {sorted(unknown)}: not in the .bib"
        cited |= citations(text)
    assert entries - cited == set(), f"never cited: {sorted(entries - cited)}"
    assert citations("as {cite:p}`a,b` and {cite:t}`c`") == {"a", "b", "c"}


def test_reference_finder_sees_each_form():
    assert referenced_chapters("chapter 7, chapters 2–5 and appendix A") == \
        {"07", "02", "03", "04", "05", "A1"}
    assert referenced_chapters("chapters 4 and 7") == {"04", "07"}


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_no_build_noise_in_stored_outputs(nb):
    """No build line (an emulator build logs it: the stored outputs come from the
    emulator), never a partial line that splits a cell's output into boxes, and no
    compiler warnings or ninja logs."""
    for c in json.loads(nb.read_text())["cells"]:
        for o in c.get("outputs", []):
            if o["output_type"] != "stream":
                continue
            text = "".join(o["text"])
            assert text.endswith("\n"), f"{nb.name}: a partial line {text[-60:]!r}"
            assert not re.search(r"^compiled \w+.* in [0-9.]+ s$", text, re.M), \
                f"{nb.name}: a build line in {text[:80]!r}"
            assert "ninja" not in text.lower() or "no work to do" in text, nb.name
            assert "warning:" not in text.lower(), nb.name


def test_the_package_and_its_tests_fit_88_columns():
    """Every Python, C++ and CUDA file of the packages and of their tests."""
    too_long = [f"{path.relative_to(ROOT)}:{i}"
                for folder in (ROOT / "src" / "attnbook",
                               ROOT / "src" / "cuda_emulator", ROOT / "tests")
                for path in sorted(folder.rglob("*"))
                if path.suffix in (".py", ".h", ".cuh", ".cu", ".cpp")
                for i, line in enumerate(path.read_text().splitlines(), 1)
                if len(line) > 88]
    assert not too_long, f"lines over 88 columns: {too_long[:20]}"


def test_code_a_reader_sees_fits_88_columns():
    """The book's text column is about 88 characters wide: notebook code, the kernel
    files and every code block a notebook displays (show_kernel, show_source) fit it.
    A displayed Markdown table is laid out by the page (test_book_html measures it)."""
    too_long = []
    kernels = ROOT / "src" / "attnbook" / "kernels"
    for path in sorted(kernels.iterdir()):
        too_long += [f"{path.name}:{i}" for i, line in
                     enumerate(path.read_text().splitlines(), 1) if len(line) > 88]
    for nb in NOTEBOOKS:
        for n, c in enumerate(json.loads(nb.read_text())["cells"]):
            if c["cell_type"] != "code":
                continue
            shown = ["".join(o.get("data", {}).get("text/markdown", ""))
                     for o in c.get("outputs", [])]
            for text in ["".join(c["source"])] + shown:   # a table's row: a table
                too_long += [f"{nb.name} cell {n}" for line in text.splitlines()
                             if len(line) > 88 and not line.startswith("|")]
    assert not too_long, f"lines over 88 columns: {sorted(set(too_long))[:20]}"


def long_output_lines(cells):
    """(cell index, line) of each stored output line over 88 columns that a reader
    sees: stream text, and text/plain results that have no richer form shown instead
    (a widget, HTML, an image)."""
    found = []
    for n, c in enumerate(cells):
        for o in c.get("outputs", []):
            if o["output_type"] == "stream":
                text = "".join(o["text"])
            elif set(o.get("data", {})) == {"text/plain"}:
                text = "".join(o["data"]["text/plain"])
            else:
                continue
            found += [(n, line) for line in text.splitlines() if len(line) > 88]
    return found


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_output_a_reader_sees_fits_88_columns(nb):
    """Printed text and results wrap to the text column, as the code does."""
    too_long = long_output_lines(json.loads(nb.read_text())["cells"])
    assert not too_long, f"{nb.name}: output lines over 88 columns: {too_long[:10]}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_outputs_hold_no_build_line(nb):
    """A notebook's outputs are made with its builds cached (or with
    ATTNBOOK_BUILD_PROGRESS=0): the line a first build shows is the reader's machine's,
    and the test run, with every build cached or not, shows none to compare with."""
    build = re.compile(r"^(compiling|compiled) \w+( \(checked\))? for ", re.M)
    for n, cell in enumerate(json.loads(nb.read_text())["cells"]):
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", "")) + "".join(
                out.get("data", {}).get("text/plain", ""))
            assert not build.search(text), f"{nb.name} cell {n}: {text[:80]!r}"


def test_long_output_lines_sees_what_a_reader_sees():
    import nbformat
    v4 = nbformat.v4
    wide, fits = "x" * 89, "x" * 88
    stream = v4.new_output("stream", text=f"{fits}\n{wide}\n")
    cells = [v4.new_code_cell(outputs=[stream]),
             v4.new_code_cell(outputs=[v4.new_output("execute_result",
                                                     {"text/plain": wide})]),
             v4.new_code_cell(outputs=[v4.new_output("display_data",
                                                     {"text/plain": wide,
                                                      "image/png": "iVBORw0KGgo="})])]
    assert long_output_lines(cells) == [(0, wide), (1, wide)]


def test_a_notebooks_cells_stay_together_and_in_order_under_xdist(tmp_path):
    """The README's `pytest -n auto --nbval`: with this repository's conftest.py, each
    notebook runs whole on one worker (its cells share one Jupyter kernel), whatever
    pytest-xdist's default distribution is."""
    import shutil
    import subprocess
    import sys
    import nbformat
    pytest.importorskip("xdist")
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    for n in range(3):
        cells = [nbformat.v4.new_code_cell("x = 0")] + [
            nbformat.v4.new_code_cell(f"assert x == {i - 1}\nx = {i}")
            for i in range(1, 8)]
        nbformat.write(nbformat.v4.new_notebook(cells=cells),
                       tmp_path / f"nb{n}.ipynb")
    (tmp_path / "test_units.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('i', range(8))\n"
        "def test_unit(i):\n    assert i >= 0\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--nbval",
                          "-p", "no:cacheprovider", "-q", "."], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "32 passed" in run.stdout
