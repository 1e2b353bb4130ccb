"""The Shakespeare model the package ships (chapter 10), and the script that trained
it."""
import pytest
import torch

from attnbook.models import pretrained

# The shipped checkpoint's held-out loss is 1.84 nats per character (uniform guessing:
# ln 66 = 4.19; the characters' frequencies alone: 3.3).
HELD_OUT_LOSS_BELOW = 2.0
PROMPTS = ["ROMEO:\n", "Second Servant:\n", "QUEEN ELIZABETH:\nMy"]


def test_the_shipped_checkpoint_is_small_and_loads():
    assert pretrained.CHECKPOINT.stat().st_size <= 5 * 2**20
    cm = pretrained.load()
    assert cm.model.cfg == pretrained.CONFIG and not cm.model.training
    assert len(cm.chars) + 1 == cm.model.cfg.vocab
    assert cm.record["steps"] == pretrained.TRAINING["steps"]
    assert cm.decode(cm.encode("ROMEO:\n")) == "ROMEO:\n"


def test_the_shipped_model_predicts_held_out_text():
    cm = pretrained.load()
    loss = pretrained.held_out_loss(cm)
    assert loss < HELD_OUT_LOSS_BELOW
    assert abs(loss - cm.record["held_out_loss"]) < 1e-3   # what the script measured


def test_the_shipped_model_writes_words():
    cm = pretrained.load()
    out = cm.model.generate([cm.encode(p) for p in PROMPTS], 40, attention_impl="sdpa")
    assert pretrained.known_words([cm.decode(t) for t in out.tolist()]) > 0.8


def test_known_words_counts_complete_words_of_the_plays():
    assert pretrained.known_words(["the king qzx is dead"]) == 3 / 4   # "dead": cut
    assert pretrained.known_words(["Romeo, wherefore"]) == 1
    assert pretrained.known_words([""]) == 0


def test_the_training_script_writes_a_checkpoint(tmp_path, capsys):
    out = tmp_path / "model.pt"
    pretrained.main(["--steps", "3", "--threads", "1", "--out", str(out)])
    assert "3 steps" in capsys.readouterr().out
    cm = pretrained.load(out)
    assert cm.record["steps"] == 3 and cm.record["final_loss"] < cm.record["first_loss"]
    assert cm.record["held_out_loss"] > HELD_OUT_LOSS_BELOW   # 3 steps learn little
    state = torch.load(out, weights_only=True)["state"]
    assert all(t.dtype == torch.float16 for t in state.values())


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], "--steps: must be at least 1, got 0"),
    (["--threads", "0"], "--threads: must be at least 1, got 0"),
    (["--out", "{tmp}"], "a folder, not a file"),
    (["--out", "{tmp}/missing/model.pt"], "no folder to write it in"),
])
def test_the_training_script_refuses_bad_arguments_before_training(tmp_path, capsys,
                                                                     args, message):
    # --out with a folder once failed only after the whole training
    with pytest.raises(SystemExit) as info:
        pretrained.main([a.format(tmp=tmp_path) for a in args])
    assert info.value.code == 2 and message in capsys.readouterr().err
