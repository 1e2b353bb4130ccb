"""The README's Python snippets run as written: in order, in one session (a later
snippet uses what an earlier one made, as a reader's notebook would), on this
machine's back end, in a scratch folder (one writes a checkpoint there)."""
import pathlib
import re

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]


def snippets() -> list:
    return re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(),
                      re.M | re.S)


def test_the_readme_has_snippets_to_run():
    assert len(snippets()) >= 5


def test_every_readme_snippet_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for n, code in enumerate(snippets(), 1):
        exec(compile(code, f"README.md snippet {n}", "exec"), namespace)
        if n == 1:   # what the first claims, before a later one reuses its names
            ab, q, k, v = (namespace[x] for x in ("ab", "q", "k", "v"))
            torch.testing.assert_close(namespace["ref"].float(),
                                       ab.attention(q, k, v, is_causal=True),
                                       rtol=1e-4, atol=1e-5)
    assert namespace["meta"].device.type == "meta"
    assert namespace["o"].shape == (2, 8, 1, 64)   # the decode step's
    assert namespace["lengths"].tolist() == [11, 301]
    assert torch.equal(namespace["c"], namespace["a"] + namespace["b"])
    assert namespace["model"].config.model_type == "gpt2"
