"""Chapter 10's benchmark (``python -m attnbook.bench 10`` on a GPU): time to first
token and time between tokens of GPT-2 small, through Hugging Face transformers and as
the book's own :class:`~attnbook.models.decoder.Decoder`, with the book's kernels, SDPA
and eager attention; and the strided model against dense attention with a mask.

The workload of the measurements this chapter quotes: a 1024-token prompt, then 100
new tokens, batch 1 and 8, float16. The weights are random (timing does not depend on
them, and the GPU machine may have no network); GPT-2's 1024 positions are extended to
fit prompt + new tokens.
"""
from __future__ import annotations

import torch

from ..bench import harness as bench
from ..bench.suites import SUITES
from .decoder import Decoder, DecoderConfig

__all__ = ["chapter10", "ALL_SUITES", "ttft_tbt", "PROMPT", "NEW_TOKENS"]

PROMPT, NEW_TOKENS = 1024, 100
# GPT-2 small: 12 layers, 12 heads of 64, width 768, 50257 tokens.
GPT2_SMALL = dict(vocab=50257, dim=768, heads=12, kv_heads=12, layers=12)


def ttft_tbt(generate, new_tokens=NEW_TOKENS, repeats=5) -> dict:
    """``generate(n)`` makes n tokens. TTFT: the median time of generate(1) (prefill
    and the first token); TBT: (median time of generate(1 + new_tokens) − TTFT) /
    new_tokens, the mean time of one decode step."""
    def ms(n):
        return bench.time_cuda(lambda: generate(n), warmup=1, repeats=repeats,
                               flush_l2=False)["median_ms"]
    ttft = ms(1)
    total = ms(1 + new_tokens)
    return dict(ms=total, ttft_ms=ttft, tbt_ms=(total - ttft) / new_tokens)


def _hf_rows(batch):
    from transformers import GPT2Config, GPT2LMHeadModel
    from .hf import register_hf
    register_hf()
    cfg = GPT2Config(n_positions=PROMPT + NEW_TOKENS + 1)
    model = GPT2LMHeadModel(cfg).to("cuda", torch.float16).eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, PROMPT), device="cuda")
    rows = []
    for impl in ("attnbook", "sdpa", "eager"):
        model.set_attn_implementation(impl)

        def generate(n):
            with torch.no_grad():
                model.generate(ids, attention_mask=torch.ones_like(ids),
                               max_new_tokens=n, min_new_tokens=n, do_sample=False,
                               pad_token_id=0)
        rows.append(dict(model="HF GPT-2", impl=impl, B=batch, dtype="float16",
                         prompt=PROMPT, new_tokens=NEW_TOKENS, **ttft_tbt(generate)))
    del model
    return rows


def _decoder_rows(batch):
    cfg = DecoderConfig(**GPT2_SMALL, max_len=PROMPT + NEW_TOKENS + 1)
    model = Decoder(cfg).to("cuda", torch.float16).eval()
    prompts = torch.randint(0, cfg.vocab, (batch, PROMPT)).tolist()
    rows = []
    for impl, cache in (("attnbook", "contiguous"), ("attnbook", "paged"),
                        ("sdpa", "contiguous"), ("eager", "contiguous")):
        def generate(n):
            model.generate(prompts, n, attention_impl=impl, cache=cache)
        rows.append(dict(model="Decoder", impl=f"{impl} {cache}", B=batch,
                         dtype="float16", prompt=PROMPT, new_tokens=NEW_TOKENS,
                         **ttft_tbt(generate)))
    del model
    return rows


def _strided_rows(S=4096, batch=1):
    """A forward pass over S tokens of a model whose every layer is strided (chapter
    5's kernel, which computes the attended keys only), against the same model with
    SDPA and the strided pattern as a dense boolean mask (float32)."""
    rows = []
    tokens = torch.randint(0, 96, (batch, S), device="cuda")
    for stride in (1, 2, 4, 8):
        if not bench.kept(dict(model="strided Decoder", stride=stride)):
            continue
        cfg = DecoderConfig(dim=512, heads=8, kv_heads=8, layers=4, max_len=S,
                            strides=(stride,) * 4)
        model = Decoder(cfg).to("cuda").eval()
        for impl in ("attnbook", "sdpa"):
            def run():
                with torch.no_grad():
                    model(tokens, attention_impl=impl)
            t = bench.time_cuda(run, warmup=2, repeats=10, flush_l2=False)
            rows.append(dict(model="strided Decoder", impl=impl, stride=stride,
                             S=S, B=batch, dtype="float32", ms=t["median_ms"],
                             times_ms=t["times_ms"]))
        del model
    return rows


def chapter10():
    """Every row of the chapter's benchmark, or those of the quick set being run
    (:func:`attnbook.bench.harness.kept`)."""
    rows = []
    for batch in (1, 8):
        if bench.kept(dict(model="HF GPT-2", B=batch)):
            rows += _hf_rows(batch)
        if bench.kept(dict(model="Decoder", B=batch)):
            rows += _decoder_rows(batch)
        torch.cuda.empty_cache()
    return rows + _strided_rows()


# Every chapter's benchmark suite, in chapter order: python -m attnbook.bench runs them.
ALL_SUITES = dict(sorted({**SUITES, "10": chapter10}.items()))
