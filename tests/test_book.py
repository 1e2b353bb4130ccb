"""The book's own rules: every notebook installs from the one repository address, and is
committed executed top to bottom with its outputs."""
import json
import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def repository():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    return cfg["url"].rstrip("/"), cfg["branch"]


def install_target(nb_path):
    """The 'attnbook @ git+URL@BRANCH' requirement in a notebook's first code cell."""
    nb = json.loads(nb_path.read_text())
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    m = re.search(r"attnbook @ git\+(\S+?)@([\w.\-/]+)\"", "".join(first["source"]))
    return m and (m.group(1), m.group(2))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_setup_cell_installs_from_the_configured_repository(nb):
    assert install_target(nb) == repository(), f"{nb.name}: first cell must install attnbook from {repository()}"


def test_consistency_check_catches_a_wrong_url(tmp_path):
    nb = json.loads(NOTEBOOKS[0].read_text())
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    first["source"] = "".join(first["source"]).replace("github.com/", "github.com/someone-else/")
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps(nb))
    assert install_target(bad) != repository()


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_executed_top_to_bottom(nb):
    cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    counts = [c["execution_count"] for c in cells]
    assert None not in counts, f"{nb.name}: unexecuted cell"
    assert counts == list(range(1, len(cells) + 1)), f"{nb.name}: not executed top to bottom once"
    for c in cells:
        for o in c["outputs"]:
            assert o["output_type"] != "error", f"{nb.name}: stored error"
            assert not (o["output_type"] == "stream" and o["name"] == "stderr"), f"{nb.name}: stderr output"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_in_the_table_of_contents(nb):
    toc = (ROOT / "_toc.yml").read_text()
    assert f"book/{nb.stem}" in toc
