"""The small :class:`Decoder` trained on Shakespeare, shipped with the package.

The text is *tiny shakespeare* (``data/tinyshakespeare.txt.gz``): 1.1 MB of
Shakespeare's plays, public domain, as gathered by Andrej Karpathy for char-rnn
(github.com/karpathy/char-rnn, ``data/tinyshakespeare/input.txt``). Its first 90 %
trains the model, the rest is held out.

The model reads characters: the 65 of the text, plus an end-of-text token (the last
id), which the text never contains and which a Hugging Face tokenizer needs for
padding (:func:`attnbook.models.gpt2_stand_in`). The checkpoint holds the
configuration, the vocabulary, the weights in float16 and the training run's record
(steps, losses). It was written by::

    python -m attnbook.models.pretrained

on one thread of a CPU shared with other work, attention through PyTorch's SDPA;
``--steps``, ``--threads`` and ``--out`` change the run.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import gzip
import pathlib
import re
import time

import torch
import torch.nn.functional as F

from ..toolchain.cli import whole
from .decoder import Decoder, DecoderConfig
from .tiny import fit

__all__ = ["CHECKPOINT", "CONFIG", "CharModel", "shakespeare", "split", "train",
           "held_out_loss", "known_words", "save", "load"]

HERE = pathlib.Path(__file__).resolve().parent
CHECKPOINT = HERE / "checkpoints" / "shakespeare_char.pt"
END = "<|endoftext|>"
CONFIG = DecoderConfig(vocab=66, dim=192, heads=6, kv_heads=6, layers=4, max_len=64)
_WORD = r"[A-Za-z']+(?=[^A-Za-z'])"
TRAINING = dict(steps=3000, batch=16, context=64, lr=3e-3, seed=0)


@functools.lru_cache(maxsize=1)
def shakespeare() -> str:
    """The whole text (1,115,394 characters), read once."""
    with gzip.open(HERE / "data" / "tinyshakespeare.txt.gz", "rt") as f:
        return f.read()


@dataclasses.dataclass
class CharModel:
    """A Decoder with its vocabulary: ``chars[i]`` is token i, and token
    ``len(chars)`` the end of text. ``record``: how it was trained."""
    model: Decoder
    chars: str
    record: dict

    def encode(self, text: str) -> list:
        return [self.chars.index(c) for c in text]

    def decode(self, ids) -> str:
        return "".join(self.chars[i] if i < len(self.chars) else END for i in ids)


def split(chars: str):
    """Token ids (LongTensor) of the text's first 90 % and of the rest."""
    text = shakespeare()
    index = torch.zeros(128, dtype=torch.long)   # the text is ASCII
    index[list(chars.encode())] = torch.arange(len(chars))
    ids = index[torch.frombuffer(bytearray(text.encode()), dtype=torch.uint8).long()]
    cut = len(ids) * 9 // 10
    return ids[:cut], ids[cut:]


def train(steps, batch=16, context=64, lr=3e-3, seed=0, report_every=0):
    """A fresh Decoder trained ``steps`` steps on the training part, attention through
    SDPA, the learning rate decaying along a cosine, printing the elapsed time every
    ``report_every`` steps (if not 0). Returns the :class:`CharModel` (in eval mode)
    and the loss of every step."""
    chars = "".join(sorted(set(shakespeare())))
    data, _ = split(chars)
    torch.manual_seed(seed)
    model = Decoder(CONFIG)
    start, calls = time.perf_counter(), iter(range(1, steps + 1))

    def forward(x):
        step = next(calls)
        if report_every and step % report_every == 0:
            print(f"step {step}: {time.perf_counter() - start:.0f} s", flush=True)
        return model(x, attention_impl="sdpa")

    losses = fit(model, data, steps, batch, context, seed, lr, decay=True,
                 forward=forward)
    return CharModel(model.eval(), chars, {}), losses


@torch.no_grad()
def held_out_loss(cm: CharModel, windows=64, context=64, seed=0) -> float:
    """Mean next-character cross entropy (nats) over ``windows`` seeded windows of
    the held-out text."""
    _, data = split(cm.chars)
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, len(data) - context - 1, (windows,), generator=g)
    device = cm.model.embed.weight.device
    x = torch.stack([data[i:i + context] for i in start]).to(device)
    y = torch.stack([data[i + 1:i + context + 1] for i in start]).to(device)
    logits = cm.model(x, attention_impl="sdpa")
    return F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()


def known_words(texts) -> float:
    """The share of the complete words of ``texts`` (a word ends at a character that
    is not a letter or an apostrophe) that occur in Shakespeare's text."""
    words = [w for text in texts for w in re.findall(_WORD, text)]
    known = _words_of_the_plays()
    return sum(w in known for w in words) / max(len(words), 1)


@functools.lru_cache(maxsize=1)
def _words_of_the_plays() -> frozenset:
    return frozenset(re.findall(_WORD, shakespeare()))


def save(cm: CharModel, path=CHECKPOINT):
    """The configuration, vocabulary, float16 weights and record, to ``path``."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.half() for k, v in cm.model.state_dict().items()}
    torch.save(dict(config=dataclasses.asdict(cm.model.cfg), chars=cm.chars,
                    state=state, record=cm.record), path)


def load(path=CHECKPOINT, device="cpu") -> CharModel:
    """The checkpoint at ``path`` as a float32 :class:`CharModel` in eval mode."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    cfg = ckpt["config"]
    model = Decoder(DecoderConfig(**{**cfg, "strides": tuple(cfg["strides"])}))
    model.load_state_dict({k: v.float() for k, v in ckpt["state"].items()})
    return CharModel(model.eval().to(device), ckpt["chars"], ckpt["record"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=whole(1), default=TRAINING["steps"])
    parser.add_argument("--out", default=str(CHECKPOINT))
    parser.add_argument("--threads", type=whole(1), default=torch.get_num_threads())
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        parser.error(f"--out {args.out}: " + ("a folder, not a file" if out.is_dir()
                                              else "no folder to write it in"))
    torch.set_num_threads(args.threads)
    run = {**TRAINING, "steps": args.steps}
    start = time.perf_counter()
    cm, losses = train(**run, report_every=100)
    seconds = time.perf_counter() - start
    with torch.no_grad():   # the float16 weights, as a reader gets them
        for p in cm.model.state_dict().values():
            p.copy_(p.half())
    cm.record = dict(run, seconds=round(seconds), threads=torch.get_num_threads(),
                     torch=str(torch.__version__), first_loss=losses[0],
                     final_loss=sum(losses[-50:]) / len(losses[-50:]),
                     held_out_loss=held_out_loss(cm))
    save(cm, args.out)
    print(f"{args.steps} steps in {seconds:.0f} s: loss {losses[0]:.2f} -> "
          f"{cm.record['final_loss']:.2f}, held out {cm.record['held_out_loss']:.2f}; "
          f"wrote {args.out}")


if __name__ == "__main__":
    main()
