"""Models built on the book's kernels: a tiny character-level Transformer that trains
with ``ab.attention`` or with PyTorch's SDPA (chapter 11); a decoder that generates
with prefill and decode kernels, trained on Shakespeare and shipped (``pretrained``),
its benchmark, and the book's attention as a Hugging Face transformers implementation,
with a loader, the Shakespeare model as a GPT-2 checkpoint and a profile of the host's
side of a prefill (``profiling``, chapter 10)."""
from . import pretrained
from .benchmarks import ALL_SUITES, chapter10
from .decoder import ATTENTIONS, Decoder, DecoderConfig, masked_attention
from .hf import gpt2_stand_in, hf_attention, load_causal_lm, register_hf
from .tiny import CharTransformer, corpus, encode, fit, train

__all__ = ["CharTransformer", "corpus", "encode", "fit", "train", "Decoder",
           "DecoderConfig", "ATTENTIONS", "masked_attention", "hf_attention",
           "register_hf", "load_causal_lm", "gpt2_stand_in", "chapter10", "ALL_SUITES",
           "pretrained"]
