"""A character-level Transformer small enough to train on the CPU emulator, whose
attention is a function passed in: the book's kernels or PyTorch's SDPA."""
from __future__ import annotations

import pathlib

import torch
import torch.nn.functional as F

__all__ = ["CharTransformer", "corpus", "encode", "fit", "train"]


def corpus() -> str:
    """Text the package ships with it: its own Python sources, concatenated."""
    root = pathlib.Path(__file__).resolve().parents[1]
    return "\n".join(p.read_text() for p in sorted(root.rglob("*.py")))


class CharTransformer(torch.nn.Module):
    """Pre-norm Transformer blocks over characters; ``attend(q, k, v)`` computes causal
    attention on [B, H, S, D] tensors."""

    def __init__(self, vocab: int, attend, dim=64, heads=2, layers=2, context=32):
        super().__init__()
        self.attend, self.heads = attend, heads
        self.embed = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.zeros(context, dim))
        self.blocks = torch.nn.ModuleList(
            torch.nn.ModuleDict(dict(
                norm1=torch.nn.LayerNorm(dim), qkv=torch.nn.Linear(dim, 3 * dim),
                out=torch.nn.Linear(dim, dim), norm2=torch.nn.LayerNorm(dim),
                mlp=torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                        torch.nn.Linear(4 * dim, dim))))
            for _ in range(layers))
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        b, s = tokens.shape
        x = self.embed(tokens) + self.pos[:s]
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["norm1"](x)).view(b, s, 3 * self.heads, -1) \
                .transpose(1, 2).chunk(3, dim=1)           # [B, H, S, D] views
            a = self.attend(q, k, v).transpose(1, 2).reshape(b, s, -1)
            x = x + blk["out"](a)
            x = x + blk["mlp"](blk["norm2"](x))
        return self.head(self.norm(x))


def encode(text: str):
    """The characters of ``text`` as token ids (a LongTensor) and the sorted
    vocabulary."""
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text], dtype=torch.long), chars


def fit(model, data, steps=200, batch=16, context=32, seed=0, lr=3e-3, forward=None,
        decay=False):
    """Train ``model`` to predict the next token of random windows of ``data`` (the
    same windows for a given seed); ``forward(x)`` gives the logits (default:
    ``model(x)``); ``decay``: the learning rate falls from ``lr`` to ``lr / 10`` along
    a cosine. Returns the loss of every step."""
    forward = model if forward is None else forward
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(
        opt, steps, eta_min=lr / 10 if decay else lr)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        start = torch.randint(0, len(data) - context - 1, (batch,), generator=g)
        x = torch.stack([data[i:i + context] for i in start]).to(device)
        y = torch.stack([data[i + 1:i + context + 1] for i in start]).to(device)
        loss = F.cross_entropy(forward(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        losses.append(loss.item())
    return losses


def train(attend, steps=200, batch=16, context=32, seed=0, lr=3e-3, text=None,
          device="cpu"):
    """Train a CharTransformer with ``attend`` from seed ``seed`` on the corpus
    (the same batches for every ``attend``); returns the loss of every step."""
    data, chars = encode(corpus() if text is None else text)
    torch.manual_seed(seed)
    model = CharTransformer(len(chars), attend, context=context).to(device)
    return fit(model, data, steps, batch, context, seed, lr)
