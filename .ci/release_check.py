"""Before a release: the book's one repository address (``repository.url`` in
``_config.yml``) and its release tag (``v`` and the package's version) must be what every
notebook's setup cell installs from, what the launch buttons open, and a tag published
at that address.

    python .ci/release_check.py           # check; exit 1, naming each disagreement
    python .ci/release_check.py --write   # rewrite every setup cell from the setting

A placeholder address fails: ``git ls-remote`` must find the tag there. tests/test_book.py
runs the offline part (the setup cells, the buttons) on every CI run.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The first code cell of every notebook, word for word. The package's extras are those
# the chapter needs: [hf] (transformers) where the chapter uses Hugging Face. pip's
# output is kept, and shown with what to do when the install fails (no network, no
# such release yet).
SETUP_CELL = """\
# Setup: where attnbook is missing (a fresh Colab runtime), install it with ninja: the
# book's release, or ATTNBOOK_SOURCE if set (a checkout, a wheel or a pip URL).
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("attnbook") is None:
    source = os.environ.get("ATTNBOOK_SOURCE",
                            "git+{url}@{tag}")
    package = f"attnbook{extras} @ {{source}}" if "://" in source else source{more}
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ninja",
                          package], capture_output=True, text=True)
    if pip.returncode:
        raise RuntimeError(
            f"pip could not install {{package}}:\\n{{pip.stderr[-2000:]}}\\nUpload "
            "attnbook's wheel or source folder (Files, on the left), run "
            "os.environ['ATTNBOOK_SOURCE'] = '/content/<its name>', then this cell")
    print("installed ninja and", package)
else:
    print("attnbook is installed")"""


def config(root: pathlib.Path) -> dict:
    return yaml.safe_load((root / "_config.yml").read_text())


def repository(root: pathlib.Path = ROOT) -> str:
    return config(root)["repository"]["url"].rstrip("/")


def release_tag(root: pathlib.Path = ROOT) -> str:
    """The tag the notebooks install from: the package's version, ``v0.1.0``."""
    init = (root / "src" / "attnbook" / "__init__.py").read_text()
    return "v" + re.search(r'__version__ = "([^"]+)"', init).group(1)


def notebooks(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    return sorted((root / "book").glob("*.ipynb"))


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def expected_setup_cell(nb_path: pathlib.Path, url: str | None = None) -> str:
    nb = json.loads(nb_path.read_text())
    root = nb_path.parents[1]
    code = "\n".join("".join(c["source"]) for c in code_cells(nb)[1:])
    extras = "[hf]" if "transformers" in code or "register_hf" in code else ""
    return SETUP_CELL.format(url=url or repository(root), tag=release_tag(root),
                             extras=extras, more=f' + "{extras}"' if extras else "")


def setup_cell_errors(root: pathlib.Path = ROOT) -> list[str]:
    """The notebooks whose first code cell is not the setup cell of the setting."""
    errors = []
    for path in notebooks(root):
        first = code_cells(json.loads(path.read_text()))[0]
        if "".join(first["source"]) != expected_setup_cell(path):
            errors.append(f"{path.name}: its first code cell is not the setup cell "
                          f"installing from {repository(root)}@{release_tag(root)} "
                          "(python .ci/release_check.py --write)")
        elif "nbval-ignore-output" not in first["metadata"].get("tags", []):
            errors.append(f"{path.name}: the setup cell lacks the nbval-ignore-output "
                          "tag (what it prints names the machine's install)")
    return errors


def button_errors(root: pathlib.Path = ROOT) -> list[str]:
    """Launch buttons open the repository's notebooks: Jupyter Book makes their links
    from repository.url and .branch, with Colab's launch on."""
    cfg = config(root)
    errors = []
    if not cfg.get("launch_buttons", {}).get("colab_url"):
        errors.append("_config.yml: launch_buttons.colab_url is not set")
    if not cfg["repository"].get("branch"):
        errors.append("_config.yml: repository.branch is not set")
    if not cfg.get("html", {}).get("use_repository_button"):
        errors.append("_config.yml: html.use_repository_button is off")
    return errors


def tag_errors(root: pathlib.Path = ROOT) -> list[str]:
    """The release tag must be published at the address (a placeholder has none)."""
    url, tag = repository(root), release_tag(root)
    try:
        done = subprocess.run(["git", "ls-remote", "--tags", url, f"refs/tags/{tag}"],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except subprocess.TimeoutExpired:
        return [f"{url}: no answer within 120 s"]
    if done.returncode or not done.stdout.strip():
        why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no tag"
        return [f"{url} has no tag {tag} ({why}): the address is a placeholder or the "
                "tag is not pushed"]
    return []


def write_setup_cells(root: pathlib.Path = ROOT) -> list[str]:
    """Rewrite each notebook's setup cell from the setting; the names of those changed."""
    changed = []
    for path in notebooks(root):
        text = path.read_text()
        nb = json.loads(text)
        first = code_cells(nb)[0]
        source = expected_setup_cell(path).splitlines(keepends=True)
        tags = first["metadata"].setdefault("tags", [])
        if first["source"] != source or "nbval-ignore-output" not in tags:
            first["source"] = source
            if "nbval-ignore-output" not in tags:
                tags.append("nbval-ignore-output")
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            changed.append(path.name)
    return changed


def main(argv=None, root: pathlib.Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true",
                        help="rewrite every notebook's setup cell from the setting")
    args = parser.parse_args(argv)
    if args.write:
        changed = write_setup_cells(root)
        print(f"rewrote {len(changed)} setup cells" + (": " if changed else "")
              + ", ".join(changed))
    errors = setup_cell_errors(root) + button_errors(root) + tag_errors(root)
    for e in errors:
        print(e, file=sys.stderr)
    if not errors:
        print(f"release {release_tag(root)} at {repository(root)}: every setup cell and "
              "button agrees, and the tag is published")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
