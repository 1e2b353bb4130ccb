"""The Python snippets of the README and of docs/package.md run as written: in order,
the README's first, in one session (a later snippet uses what an earlier one made, as a
reader's notebook would), on this machine's back end, in a scratch folder (one writes a
checkpoint there)."""
import pathlib
import re

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]


PAGES = ("README.md", "docs/package.md")


def snippets(page=None) -> list:
    return [code for name in ([page] if page else PAGES)
            for code in re.findall(r"^```python\n(.*?)^```",
                                   (ROOT / name).read_text(), re.M | re.S)]


def test_the_readme_and_the_package_page_have_snippets_to_run():
    assert len(snippets("README.md")) >= 1 and len(snippets("docs/package.md")) >= 4


def test_every_readme_snippet_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for n, code in enumerate(snippets(), 1):
        exec(compile(code, f"snippet {n} (README.md, docs/package.md)", "exec"),
             namespace)
        if n == 1:   # what the first claims, before a later one reuses its names
            ab, q, k, v = (namespace[x] for x in ("ab", "q", "k", "v"))
            torch.testing.assert_close(namespace["ref"].float(),
                                       ab.attention(q, k, v, is_causal=True),
                                       rtol=1e-4, atol=1e-5)
    assert namespace["meta"].device.type == "meta"
    assert namespace["o"].shape == (2, 8, 1, 64)   # the decode step's
    assert namespace["lengths"].tolist() == [12, 302]   # two steps appended
    assert torch.equal(namespace["c"], namespace["a"] + namespace["b"])
    assert namespace["model"].config.model_type == "gpt2"
