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
import pathlib
import re

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
        o = attention(query, key, value, is_causal=causal, scale=scaling,
                      enable_gqa=True)
    else:
        o = attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                      enable_gqa=True)
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


def gpt2_stand_in(folder) -> str:
    """Write the package's Shakespeare model (:mod:`attnbook.models.pretrained`) to
    ``folder`` as a GPT-2 checkpoint, the way the Hub's ``gpt2`` was written
    (``save_pretrained``). The :class:`Decoder` is GPT-2's architecture (learnt
    positions, pre-norm blocks, exact GELU, an output layer tied to the token
    embedding), so its weights move over unchanged, the linear layers transposed into
    GPT-2's ``Conv1D``; its tokenizer is GPT-2's byte-level one with the model's
    characters as its vocabulary and no merges. :func:`load_causal_lm` then loads it
    exactly as it loads ``"gpt2"``, so the code path a reader with network runs is
    the one tested without it. Returns the folder's path."""
    if pathlib.Path(folder).exists() and not pathlib.Path(folder).is_dir():
        raise NotADirectoryError(f"{str(folder)!r} is a file, not a folder to write "
                                 "the checkpoint into")
    import transformers
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.pre_tokenizers import ByteLevel

    from .pretrained import END, load
    cm = load()
    cfg, state = cm.model.cfg, cm.model.state_dict()
    byte_level = ByteLevel(add_prefix_space=False, use_regex=False)
    vocab = {byte_level.pre_tokenize_str(c)[0][0]: i for i, c in enumerate(cm.chars)}
    bpe = ByteLevelBPETokenizer(vocab, [])
    bpe.add_special_tokens([END])
    tokenizer = transformers.GPT2TokenizerFast(tokenizer_object=bpe, bos_token=END,
                                               eos_token=END, unk_token=END)
    end = tokenizer.convert_tokens_to_ids(END)
    config = transformers.GPT2Config(
        vocab_size=cfg.vocab, n_positions=cfg.max_len, n_embd=cfg.dim,
        n_layer=cfg.layers, n_head=cfg.heads, activation_function="gelu",
        bos_token_id=end, eos_token_id=end)
    names = {"embed": "wte", "pos": "wpe", "norm": "ln_f", "norm1": "ln_1",
             "norm2": "ln_2", "qkv": "attn.c_attn", "out": "attn.c_proj",
             "mlp.0": "mlp.c_fc", "mlp.2": "mlp.c_proj"}
    gpt2 = {"lm_head.weight": state["embed.weight"]}
    for key, value in state.items():
        _, layer, module, kind = re.fullmatch(r"(blocks\.(\d+)\.)?(.+)\.(\w+)",
                                              key).groups()
        name = names[module] if layer is None else f"h.{layer}.{names[module]}"
        conv1d = kind == "weight" and "." in names[module]   # attn.* and mlp.*
        gpt2[f"transformer.{name}.{kind}"] = value.T if conv1d else value
    model = transformers.GPT2LMHeadModel(config)
    model.load_state_dict(gpt2)
    with _no_progress_bars():
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return str(folder)
