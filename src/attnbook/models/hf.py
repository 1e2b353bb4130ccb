"""The book's kernels as an attention implementation of Hugging Face transformers.

After :func:`register_hf`, any model of transformers 5.x that uses its
``AttentionInterface`` (GPT-2, Llama, Qwen, …) runs on the book's kernels with
``attn_implementation="attnbook"``, with its own cache::

    ab.models.register_hf()
    model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="attnbook")

The model hands the attention function q [B, H, Sq, D] and the whole cached k, v
[B, Hkv, Sk, D] (its cache has already appended the new tokens), plus the mask that
transformers builds for SDPA: None when plain causal attention (or a single query
seeing every key) is meant, else a boolean [B, 1, Sq, Sk] mask, True = attend. Routing:

- a single query per sequence with no mask (decoding): the decode kernel of chapter 9,
  the model's cache read as a contiguous KV cache of Sk positions;
- anything else (the prompt, or any step of a left-padded batch): the fused kernel of
  chapters 7 and 8, causal or with the mask. A query row with no key to attend (a
  padding position) gives zeros, where SDPA may give NaN.
"""
from __future__ import annotations

import contextlib

import torch

from ..ops.attention import attention
from ..ops.decode import DECODE_HEAD_DIMS, choose_num_splits, decode_attention

__all__ = ["register_hf", "hf_attention", "load_causal_lm", "gpt2_stand_in",
           "NAME"]

NAME = "attnbook"


def hf_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                 is_causal=None, **kwargs):
    """transformers' attention-function signature; returns ([B, Sq, H, D], None)."""
    if dropout:
        raise NotImplementedError("the book's kernels compute attention without "
                                  "dropout: call model.eval()")
    if kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None:
        raise NotImplementedError("attnbook takes no position bias or softcap")
    sq, sk = query.shape[2], key.shape[2]
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    grad = torch.is_grad_enabled() and any(t.requires_grad
                                           for t in (query, key, value))
    b, h, _, d = query.shape
    if attention_mask is None and sq == 1 and d in DECODE_HEAD_DIMS and not grad:
        # Every sequence holds exactly the Sk positions of the model's cache, so the
        # lengths need no check against it (ab.attention_with_kvcache would read them
        # back from the GPU to check them, at every layer of every step): the
        # registered op directly, as chapter 9's benchmark calls it.
        hkv = key.shape[1]
        lengths = torch.full((b,), sk, dtype=torch.int32, device=query.device)
        splits = choose_num_splits(b, hkv, h // hkv, sk, query.device)
        scale = d ** -0.5 if scaling is None else float(scaling)
        o, _ = decode_attention(query, key, value, lengths, None, 0, splits, True,
                                scale)
    elif attention_mask is None:
        causal = is_causal and sq > 1
        if causal and sk > sq:
            # transformers drops the mask only for a prompt in an empty static cache:
            # the positions past the prompt hold nothing yet (as its SDPA path does)
            key, value = key[:, :, :sq], value[:, :, :sq]
        o = attention(query, key, value, is_causal=causal, scale=scaling)
    else:
        o = attention(query, key, value, attn_mask=attention_mask, scale=scaling)
    return o.transpose(1, 2).contiguous(), None


def register_hf() -> str:
    """Register :func:`hf_attention` with transformers (and SDPA's mask builder for
    it) as ``attn_implementation="attnbook"``; returns that name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(NAME, hf_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


@contextlib.contextmanager
def _no_progress_bars():
    """transformers draws a progress bar on stderr for each checkpoint it writes or
    reads: noise in a notebook's outputs."""
    from transformers.utils import logging
    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            logging.enable_progress_bar()


def load_causal_lm(checkpoint: str = "gpt2"):
    """``(model, tokenizer)`` of a causal language model: a name on the Hugging Face
    Hub (``"gpt2"``) or a folder written by ``save_pretrained`` (such as
    :func:`gpt2_stand_in`'s), in eval mode, its tokenizer padding on the left with
    the end-of-text token (as batched generation needs)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    with _no_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(checkpoint)
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    tokenizer.pad_token, tokenizer.padding_side = tokenizer.eos_token, "left"
    return model.eval(), tokenizer


# What the stand-in's tokenizer learns its merges from: fixed, so that its tokens (and
# the text the stand-in generates) stay the same from one version of the package to
# the next.
_STAND_IN_TEXT = """\
The attention mechanism lets every token of a sequence look at every other token. A GPU
kernel that computes it reads the queries, the keys and the values from memory, takes
the dot product of each query with each key, turns each row of scores into weights with
a softmax, and sums the values with those weights. The kernels of this book do it in
tiles that fit in shared memory and registers, so that the matrix of scores is never
written to memory at all.
"""


def gpt2_stand_in(folder, seed: int = 0) -> str:
    """Write a GPT-2-shaped checkpoint to ``folder`` the way the Hub's ``gpt2`` was
    written (``save_pretrained``): random weights (large enough that greedy decoding
    has no near-ties), 2 layers of width 128, and a byte-level BPE tokenizer learnt
    from a paragraph. :func:`load_causal_lm` then loads it exactly as it loads
    ``"gpt2"``, so the code path a reader with network runs is the one tested without
    it. Returns the folder's path."""
    import transformers
    from tokenizers import ByteLevelBPETokenizer
    end = "<|endoftext|>"
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([_STAND_IN_TEXT], vocab_size=400, special_tokens=[end],
                            show_progress=False)
    tokenizer = transformers.GPT2TokenizerFast(tokenizer_object=bpe, bos_token=end,
                                               eos_token=end, unk_token=end)
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer), n_positions=128, n_embd=128, n_layer=2, n_head=4,
        initializer_range=0.3, bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id)
    with torch.random.fork_rng(), _no_progress_bars():
        torch.manual_seed(seed)
        transformers.GPT2LMHeadModel(config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return str(folder)
