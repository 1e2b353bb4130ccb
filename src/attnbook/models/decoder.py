"""A small decoder-only Transformer that generates with the book's kernels.

``Decoder.generate`` runs the two phases of inference. **Prefill**: the whole prompt in
one pass, attention through the fused kernel (``ab.attention``), each layer's keys and
values written into a KV cache by the append kernel. **Decode**: one token per sequence
per step, attention of its one query to the cache through the decode kernel
(``ab.attention_with_kvcache``), which appends the new key and value first. The same
model runs PyTorch's SDPA or an eager softmax instead (``attention="sdpa"`` /
``"eager"``), and without a cache (``cache=None``: the whole sequence again every step),
so that every way of generating can be compared token for token.

Prompts of different lengths are padded on the right and carry their lengths: the
kernels mask keys past a sequence's length (``key_lengths``, ``cache_seqlens``), and
each sequence's next token goes at its own position.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..args.decode import plan_kvcache
from ..ops.attention import attention
from ..ops.decode import attention_with_kvcache
from ..ops.kv_cache import kv_cache_append
from ..ops.paged_kv_cache import PagedKVCache

__all__ = ["DecoderConfig", "Decoder", "ATTENTIONS", "CACHES", "masked_attention"]

ATTENTIONS = ("attnbook", "sdpa", "eager")
CACHES = ("contiguous", "paged", None)


@dataclass(frozen=True)
class DecoderConfig:
    """The model's sizes. ``strides``: one per layer (1 = dense causal attention,
    s > 1 = query i sees keys j ≤ i with j % s == 0); empty = every layer dense."""
    vocab: int = 96
    dim: int = 64
    heads: int = 2
    kv_heads: int = 2
    layers: int = 2
    max_len: int = 128
    strides: tuple = ()

    def __post_init__(self):
        if self.dim % self.heads or self.heads % self.kv_heads:
            raise ValueError("dim must be a multiple of heads, heads of kv_heads")
        if self.strides and len(self.strides) != self.layers:
            raise ValueError(f"strides needs one entry per layer ({self.layers})")

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def stride(self, layer: int) -> int:
        return self.strides[layer] if self.strides else 1


def masked_attention(q, k, v, lengths, stride=1, eager=False):
    """Causal attention (bottom-right aligned), keys j < lengths[b], j % stride == 0,
    grouped heads: PyTorch's SDPA with a boolean mask, or the softmax spelled out
    (``eager``). The reference every kernel path of the model is checked against."""
    sq, sk = q.shape[2], k.shape[2]
    i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=q.device)
    mask = (j <= i) & (j % stride == 0) & (j < lengths.view(-1, 1, 1, 1))
    if not eager:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              enable_gqa=True)
    g = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(g, dim=1) for t in (k, v))
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    return s.masked_fill(~mask, -math.inf).softmax(-1) @ v


class _Cache:
    """Keys and values of every layer for B sequences, with their lengths (int32 [B])
    kept on the host: the mirror a server keeps, so that no layer reads them back from
    the GPU. Contiguous: [B, Hkv, capacity, D] per layer. Paged: one
    :class:`PagedKVCache` keeps the block table (on the host too) and the free list
    (shuffled, as a busy server's would be); every layer has its own pools of the same
    shape and shares that table (the layers hold the same positions)."""

    def __init__(self, cfg, batch, capacity, kind, dtype, device, block_size=16,
                 nan=True):
        self.lengths = torch.zeros(batch, dtype=torch.int32)
        self.pages = None
        if kind == "paged":
            blocks = -(-capacity // block_size)
            self.pages = PagedKVCache(batch * blocks, cfg.kv_heads, cfg.head_dim,
                                      max_seqs=batch, max_blocks_per_seq=blocks,
                                      block_size=block_size, dtype=dtype, device=device,
                                      generator=torch.Generator().manual_seed(0))
            shape = self.pages.k_cache.shape
        else:
            shape = (batch, cfg.kv_heads, capacity, cfg.head_dim)
        # NaN where nothing was written, so that a kernel reading such a slot would
        # show it; zeros where a masked key's value still meets a zero probability
        # (SDPA, eager, and the GEMM of chapter 5's strided path: 0 · NaN = NaN).
        self.kv = [tuple(torch.full(shape, math.nan if nan and cfg.stride(i) == 1
                                    else 0.0, dtype=dtype, device=device)
                         for _ in range(2)) for i in range(cfg.layers)]

    def plan(self, n: int):
        """Room for n more positions of every sequence, and the checked positions of
        the call that appends them: one check, and one copy to the device, for every
        layer of a forward (:func:`attnbook.plan_kvcache`)."""
        if self.pages is None:
            return plan_kvcache(self.kv[0][0], self.lengths, new_tokens=n)
        for seq in range(len(self.pages.lengths)):
            self.pages.reserve(seq, n)
        return self.pages.plan(n)

    def advance(self, n: torch.Tensor):
        """Count n [B] (on the host) tokens appended to each sequence."""
        self.lengths += n.to(torch.int32)
        if self.pages is not None:
            for seq, m in enumerate(n.tolist()):
                self.pages.advance(seq, m)


class Decoder(torch.nn.Module):
    """Token and position embeddings, pre-norm blocks (grouped-head attention, GELU
    MLP), a final norm and an output layer tied to the token embedding."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.dim, cfg.head_dim
        self.embed = torch.nn.Embedding(cfg.vocab, d)
        self.pos = torch.nn.Embedding(cfg.max_len, d)
        self.blocks = torch.nn.ModuleList(
            torch.nn.ModuleDict(dict(
                norm1=torch.nn.LayerNorm(d),
                qkv=torch.nn.Linear(d, (cfg.heads + 2 * cfg.kv_heads) * hd),
                out=torch.nn.Linear(d, d), norm2=torch.nn.LayerNorm(d),
                mlp=torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                        torch.nn.Linear(4 * d, d))))
            for _ in range(cfg.layers))
        self.norm = torch.nn.LayerNorm(d)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)

    # -- the layers ---------------------------------------------------------------
    def _run(self, tokens, positions, attend):
        """Logits [B, S, vocab] of tokens [B, S] at positions [B, S];
        ``attend(layer, q, k, v)`` gives [B, H, S, D] from q [B, H, S, D] and k, v
        [B, Hkv, S, D]."""
        cfg, (b, s) = self.cfg, tokens.shape
        x = self.embed(tokens) + self.pos(positions)
        for layer, blk in enumerate(self.blocks):
            qkv = blk["qkv"](blk["norm1"](x)).view(b, s, -1, cfg.head_dim)
            q, k, v = qkv.transpose(1, 2).split(
                [cfg.heads, cfg.kv_heads, cfg.kv_heads], dim=1)
            a = attend(layer, q, k, v)
            x = x + blk["out"](a.transpose(1, 2).reshape(b, s, -1))
            x = x + blk["mlp"](blk["norm2"](x))
        return self.norm(x) @ self.embed.weight.T

    def _prefill_attention(self, attention_impl, lengths):
        def attend(layer, q, k, v):
            stride = self.cfg.stride(layer)
            if attention_impl != "attnbook":
                return masked_attention(q, k, v, lengths, stride,
                                        eager=attention_impl == "eager")
            if stride > 1:   # chapter 5's kernel: computes the attended keys only
                return attention(q, k, v, is_causal=True, key_lengths=lengths,
                                 stride=stride, impl="tiled", enable_gqa=True)
            return attention(q, k, v, is_causal=True, key_lengths=lengths,
                             enable_gqa=True)
        return attend

    def forward(self, tokens, lengths=None, attention_impl="attnbook"):
        """Logits [B, S, vocab] of the whole of tokens [B, S] (right-padded: sequence b
        is its first lengths[b] tokens; logits past them are meaningless)."""
        b, s = tokens.shape
        if lengths is None:
            lengths = torch.full((b,), s, dtype=torch.int32, device=tokens.device)
        pos = torch.arange(s, device=tokens.device).expand(b, s)
        return self._run(tokens, pos, self._prefill_attention(attention_impl, lengths))

    # -- the two phases of generation ---------------------------------------------
    def prefill(self, tokens, lengths, cache: _Cache, attention_impl="attnbook"):
        """The prompts tokens [B, S] (lengths [B]) in one pass: their keys and values
        written into the empty ``cache``, and the logits [B, vocab] of each sequence's
        last prompt token. Given on the host, lengths are not read back from the
        device."""
        b, s = tokens.shape
        plan = cache.plan(s)   # every layer appends at the same positions
        host_lengths = lengths.cpu()
        lengths = lengths.to(tokens.device, non_blocking=True)
        attend_prompt = self._prefill_attention(attention_impl, lengths)

        def attend(layer, q, k, v):
            k_cache, v_cache = cache.kv[layer]
            if attention_impl == "attnbook":
                kv_cache_append(k_cache, v_cache, k, v, plan=plan)
            else:
                k_cache[:, :, :s], v_cache[:, :, :s] = k, v
            return attend_prompt(layer, q, k, v)

        pos = torch.arange(s, device=tokens.device).expand(b, s)
        logits = self._run(tokens, pos, attend)
        cache.advance(host_lengths)
        return logits[torch.arange(b), lengths.long() - 1]

    def decode_step(self, tokens, cache: _Cache, attention_impl="attnbook"):
        """One new token per sequence, tokens [B], at position lengths[b]: its key and
        value appended to the cache, its query attending every cached position. Returns
        the logits [B, vocab]."""
        plan = cache.plan(1)            # checked once, for every layer
        lengths = plan.cache_seqlens    # int32 [B], on the device

        def attend(layer, q, k, v):
            k_cache, v_cache = cache.kv[layer]
            stride = self.cfg.stride(layer)
            if attention_impl == "attnbook" and stride == 1:
                return attention_with_kvcache(q, k_cache, v_cache, k, v, plan=plan)
            if plan.block_table is not None:
                raise NotImplementedError("strided layers and the SDPA baselines "
                                          "decode from a contiguous cache")
            n = max(plan.lengths) + 1
            if attention_impl == "attnbook":   # strided: append, then chapter 5's
                kv_cache_append(k_cache, v_cache, k, v, plan=plan)
                return attention(q, k_cache[:, :, :n], v_cache[:, :, :n],
                                 key_lengths=lengths + 1, stride=stride, impl="tiled",
                                 enable_gqa=True)
            rows = torch.arange(len(lengths), device=lengths.device)
            k_cache[rows, :, lengths.long()] = k[:, :, 0]
            v_cache[rows, :, lengths.long()] = v[:, :, 0]
            return masked_attention(q, k_cache[:, :, :n], v_cache[:, :, :n],
                                    lengths + 1, stride,
                                    eager=attention_impl == "eager")

        logits = self._run(tokens[:, None], lengths.long()[:, None], attend)
        cache.advance(torch.ones_like(cache.lengths))
        return logits[:, 0]

    @torch.no_grad()
    def generate(self, prompts, max_new_tokens, *, attention_impl="attnbook",
                 cache="contiguous", block_size=16, times=None, temperature=0.0,
                 seed=0):
        """Greedy generation: ``prompts`` is a list of token lists (any lengths ≥ 1);
        returns the new tokens, LongTensor [B, max_new_tokens]. With ``temperature``
        > 0 it samples instead, by the Gumbel-max trick: the argmax of logits /
        temperature plus Gumbel noise is a draw from softmax(logits / temperature). The
        noise depends on the step and ``seed`` only, so every implementation, cache and
        batch draws alike.

        ``cache``: "contiguous" or "paged" (pages of ``block_size`` positions from a
        shared pool), or None: no cache, the whole sequence is run again at every
        step. ``attention_impl``: "attnbook" (the book's kernels), "sdpa" or
        "eager". ``times``: a list to which the wall-clock milliseconds of the prefill
        (up to the first token) and of each decode step are appended."""
        if attention_impl not in ATTENTIONS:
            raise ValueError(f"attention_impl must be one of {ATTENTIONS}")
        if cache not in CACHES:
            raise ValueError(f"cache must be one of {CACHES}, got {cache!r}")
        if cache == "paged" and attention_impl != "attnbook":
            raise ValueError("a paged cache is read by the book's kernels only")
        lens = [len(p) for p in prompts]
        if not prompts or min(lens) < 1:
            raise ValueError("prompts must be a non-empty list of non-empty lists")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or \
                max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a whole number >= 1, got "
                             f"{max_new_tokens!r}")
        if cache == "paged" and (isinstance(block_size, bool) or
                                 not isinstance(block_size, int) or block_size < 1):
            raise ValueError(f"block_size must be a whole number >= 1, got "
                             f"{block_size!r}")
        for b, p in enumerate(prompts):
            bad = [t for t in p if not 0 <= int(t) < self.cfg.vocab]
            if bad:
                raise ValueError(f"prompt {b} holds token {bad[0]}, outside the "
                                 f"vocabulary of {self.cfg.vocab}")
        total = max(lens) + max_new_tokens
        if total > self.cfg.max_len:
            raise ValueError(f"prompt ({max(lens)}) + new tokens ({max_new_tokens}) "
                             f"exceed the model's {self.cfg.max_len} positions")
        device = self.embed.weight.device
        tokens = torch.zeros(len(prompts), total, dtype=torch.long, device=device)
        for b, p in enumerate(prompts):
            tokens[b, :len(p)] = torch.tensor(p)
        host_lengths = torch.tensor(lens, dtype=torch.int32)
        lengths = host_lengths.to(device)
        rows = torch.arange(len(prompts), device=device)
        pick = _picker(temperature, seed, max_new_tokens, self.cfg.vocab, device)
        out = []
        if cache is None:
            for step in range(max_new_tokens):
                logits = self(tokens[:, :int(lengths.max())], lengths, attention_impl)
                out.append(pick(step, logits[rows, lengths.long() - 1]))
                tokens[rows, lengths.long()] = out[-1]
                lengths = lengths + 1
            return torch.stack(out, 1)
        kv = _Cache(self.cfg, len(prompts), total, cache, self.embed.weight.dtype,
                    device, block_size, nan=attention_impl == "attnbook")
        clock = _Clock(device, times)
        logits = self.prefill(tokens[:, :max(lens)], host_lengths, kv, attention_impl)
        for step in range(max_new_tokens):
            out.append(pick(step, logits))
            clock.tick()
            if step + 1 < max_new_tokens:
                logits = self.decode_step(out[-1], kv, attention_impl)
        return torch.stack(out, 1)


def _picker(temperature, seed, steps, vocab, device):
    """pick(step, logits [B, vocab]) -> the next tokens [B]: the argmax, or with
    ``temperature`` > 0 a sample (see Decoder.generate)."""
    if temperature <= 0:
        return lambda step, logits: logits.argmax(-1)
    g = torch.Generator().manual_seed(seed)
    uniform = torch.rand(steps, vocab, generator=g, dtype=torch.float64)
    gumbel = (-(-uniform.clamp_min(1e-300).log()).log()).float().to(device)
    return lambda step, logits: (logits.float() / temperature + gumbel[step]).argmax(-1)


class _Clock:
    """Appends the milliseconds since the previous tick to ``times`` (if a list),
    after the GPU has finished the work queued so far."""

    def __init__(self, device, times):
        self.times, self.cuda = times, torch.device(device).type == "cuda"
        self.last = time.perf_counter()

    def tick(self):
        if self.times is None:
            return
        if self.cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        self.times.append((now - self.last) * 1e3)
        self.last = now
