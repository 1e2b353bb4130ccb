"""Chapter 10: generation with the book's kernels, token for token against PyTorch.

The reference for every generation is the same model run one sequence at a time,
without a cache and without padding, through PyTorch's SDPA; the weights are drawn
wide enough that greedy decoding does not collapse onto one token."""
import math
from unittest import mock

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import attnbook as ab
from attnbook.models import Decoder, DecoderConfig, masked_attention
from attnbook.models import decoder as decoder_module
from attnbook.reference import attention_reference

PROMPTS = [[5, 17, 3, 42, 8, 1, 77], [9], [30, 31, 32, 33]]


def model_of(device, seed=0, **cfg):
    """The model, its weights drawn on the CPU, on ``device``."""
    torch.manual_seed(seed)
    model = Decoder(DecoderConfig(**cfg)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.4)
    return model.to(device)


def reference_tokens(model, prompts, n):
    return torch.stack([model.generate([p], n, attention_impl="sdpa", cache=None)[0]
                        for p in prompts])


@pytest.mark.parametrize("cfg", [dict(), dict(dim=128, heads=4, kv_heads=1),
                                 dict(dim=96, heads=3, kv_heads=3, layers=3)],
                         ids=["mha", "gqa", "d32x3"])
@pytest.mark.parametrize("cache", ["contiguous", "paged", None])
def test_generation_matches_sdpa_token_for_token(cfg, cache, device):
    model = model_of(device, **cfg)
    want = reference_tokens(model, PROMPTS, 12)
    assert len(set(want.flatten().tolist())) > 3   # the check is not vacuous
    got = model.generate(PROMPTS, 12, cache=cache)
    assert torch.equal(got, want)


@pytest.mark.parametrize("cache", ["contiguous", "paged", None])
def test_sampling_draws_alike_in_every_batch_cache_and_implementation(cache, device):
    model = model_of(device)
    sampled = dict(temperature=0.7, seed=3)
    want = torch.stack([model.generate([p], 12, attention_impl="sdpa", cache=None,
                                       **sampled)[0] for p in PROMPTS])
    assert not torch.equal(want, reference_tokens(model, PROMPTS, 12))
    assert torch.equal(model.generate(PROMPTS, 12, cache=cache, **sampled), want)


def test_gumbel_max_draws_from_the_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    steps, temperature = 20000, 0.8
    pick = decoder_module._picker(temperature, 0, steps, 4, "cpu")
    counts = torch.bincount(torch.cat([pick(t, logits) for t in range(steps)]), None,
                            4).double()
    want = torch.softmax(logits[0].double() / temperature, 0)
    # within 4 standard deviations of a multinomial count
    sigma = (want * (1 - want) / steps).sqrt()
    assert ((counts / steps - want).abs() <= 4 * sigma).all()


def test_float16_generation_runs_the_tensor_core_prefill(device):
    """Prefill on chapter 8's kernel (head_dim 64), decode in float16; on this model
    and these prompts rounding leaves every greedy choice as SDPA's."""
    model = model_of(device, 7, dim=128).half()
    want = model.generate(PROMPTS, 10, attention_impl="sdpa")
    assert len(set(want.flatten().tolist())) > 3
    for cache in ("contiguous", "paged"):
        assert torch.equal(model.generate(PROMPTS, 10, cache=cache), want)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_cached_baselines_match_the_uncached_reference(impl, device):
    model = model_of(device, 1)
    assert torch.equal(model.generate(PROMPTS, 10, attention_impl=impl),
                       reference_tokens(model, PROMPTS, 10))


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_paged_generation_with_pages_smaller_than_a_prompt(block_size, device):
    model = model_of(device, 2)
    got = model.generate(PROMPTS, 9, cache="paged", block_size=block_size)
    assert torch.equal(got, reference_tokens(model, PROMPTS, 9))


def test_prefill_and_decode_run_the_book_kernels():
    # The routing, counted by mocks, is the same on every device: CPU only.
    model = model_of("cpu", 3)
    with mock.patch.object(decoder_module, "attention",
                           wraps=decoder_module.attention) as prefill, \
         mock.patch.object(decoder_module, "attention_with_kvcache",
                           wraps=decoder_module.attention_with_kvcache) as decode, \
         mock.patch.object(decoder_module, "kv_cache_append",
                           wraps=decoder_module.kv_cache_append) as append:
        model.generate(PROMPTS, 5)
    layers = model.cfg.layers
    assert prefill.call_count == layers and append.call_count == layers
    assert decode.call_count == 4 * layers   # the first token comes from the prefill
    assert all(c.kwargs["key_lengths"].tolist() == [7, 1, 4]
               for c in prefill.call_args_list)


def test_decode_reads_no_cache_slot_past_a_sequence(device):
    """The caches start as NaN: a kernel that read an unwritten slot (past a short
    prompt, or in an unused page) would turn the logits into NaN."""
    model = model_of(device, 4)
    cache = decoder_module._Cache(model.cfg, 3, 20, "paged", torch.float32, device,
                                  block_size=4)
    tokens = torch.zeros(3, 7, dtype=torch.long, device=device)
    for b, p in enumerate(PROMPTS):
        tokens[b, :len(p)] = torch.tensor(p, device=device)
    lengths = torch.tensor([7, 1, 4], dtype=torch.int32, device=device)
    logits = model.prefill(tokens, lengths, cache)
    for _ in range(5):
        logits = model.decode_step(logits.argmax(-1), cache)
        assert torch.isfinite(logits).all()
    assert cache.kv[0][0].isnan().any()   # unwritten slots remain
    assert cache.lengths.tolist() == [12, 6, 9]


class _CountOps(TorchDispatchMode):
    """Counts the ATen operators dispatched inside it: the host's work, op by op."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def _host_ops(layers, kind, batch=8, prompt=1024):
    """The operators of a prefill and a decoding step with a ``layers``-layer model on
    the meta device, which holds shapes and no values: a read back from it raises."""
    model = Decoder(DecoderConfig(layers=layers, max_len=prompt + 1)).eval().to("meta")
    cache = decoder_module._Cache(model.cfg, batch, prompt + 1, kind, torch.float32,
                                  "meta")
    tokens = torch.zeros(batch, prompt, dtype=torch.long, device="meta")
    with _CountOps() as count:
        model.prefill(tokens, torch.full((batch,), prompt, dtype=torch.int32), cache)
        model.decode_step(torch.zeros(batch, dtype=torch.long, device="meta"), cache)
    assert cache.lengths.tolist() == [prompt + 1] * batch
    return count.ops


@torch.no_grad()
def test_a_paged_forward_reads_nothing_back_and_checks_its_pages_once():
    """All layers share one block table: it is checked once per forward (a check per
    layer made a 1024-token paged prefill 5.6 times the contiguous one's time to first
    token on an H200), and the lengths and table are the host's mirror, so no layer
    waits for the GPU to read them back. The meta device proves the second (any read
    back raises); counting the host's operators shows the first: a paged layer costs
    the host what a contiguous one does, whatever the pages' check costs once."""
    checks = mock.patch("attnbook.args.decode._check_pages",
                        wraps=ab.args.decode._check_pages)
    with checks as check_pages:
        _host_ops(12, "paged")
    assert check_pages.call_count == 2   # the prefill's and the step's
    per_layer = {kind: (_host_ops(4, kind) - _host_ops(2, kind)) / 2
                 for kind in ("contiguous", "paged")}
    assert per_layer["paged"] == per_layer["contiguous"] > 0, per_layer


@pytest.mark.gpu
@pytest.mark.parametrize("cache", ["contiguous", "paged"])
@torch.no_grad()
def test_generation_never_waits_for_the_gpu_inside_a_forward(cache):
    """CUDA's synchronisation check set to raise on any call that waits for the GPU (a
    copy back, an item()) during a prefill and decoding steps."""
    model = model_of("cuda", layers=4)
    kv = decoder_module._Cache(model.cfg, 3, 24, cache, torch.float32, "cuda")
    tokens = torch.zeros(3, 7, dtype=torch.long, device="cuda")
    for b, p in enumerate(PROMPTS):
        tokens[b, :len(p)] = torch.tensor(p)
    lengths = torch.tensor([7, 1, 4], dtype=torch.int32)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        logits = model.prefill(tokens, lengths, kv)
        for _ in range(4):
            logits = model.decode_step(logits.argmax(-1), kv)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(logits).all() and kv.lengths.tolist() == [11, 5, 8]


@pytest.mark.parametrize("strides", [(2, 1), (3, 3), (1, 5)])
def test_strided_model_matches_plain_pytorch_strided_attention(strides, device):
    model = model_of(device, 5, strides=strides)
    tokens = torch.randint(0, 96, (2, 23)).to(device)
    lengths = torch.tensor([23, 11], dtype=torch.int32, device=device)
    got = model(tokens, lengths)
    want = model(tokens, lengths, attention_impl="sdpa")
    assert torch.allclose(got[0], want[0], atol=1e-4, rtol=1e-4)
    assert torch.allclose(got[1, :11], want[1, :11], atol=1e-4, rtol=1e-4)
    assert torch.equal(model.generate(PROMPTS, 8), reference_tokens(model, PROMPTS, 8))


def test_strided_layers_use_the_kernel_that_skips_masked_keys():
    # The routing, seen by a mock, is the same on every device: CPU only.
    model = model_of("cpu", 6, strides=(4, 1))
    with mock.patch.object(decoder_module, "attention",
                           wraps=decoder_module.attention) as attend:
        model(torch.randint(0, 96, (1, 16)))
    impls = [(c.kwargs.get("stride"), c.kwargs.get("impl")) for c in
             attend.call_args_list]
    assert impls == [(4, "tiled"), (None, None)]


@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("sq,sk", [(9, 9), (1, 13), (4, 10)])
def test_masked_attention_is_the_books_mask(stride, sq, sk):
    g = torch.Generator().manual_seed(stride * sq)
    q = torch.randn(2, 4, sq, 16, generator=g)
    k, v = (torch.randn(2, 2, sk, 16, generator=g) for _ in range(2))
    lengths = torch.tensor([sk, sk - 3])
    want = attention_reference(q, *(t.repeat_interleave(2, 1) for t in (k, v)),
                               is_causal=True, stride=stride if stride > 1 else None,
                               key_lengths=lengths, float64=True)
    for eager in (False, True):
        got = masked_attention(q, k, v, lengths, stride, eager=eager)
        assert torch.allclose(got, want.float(), atol=1e-5)


def test_generation_rejects_bad_requests(device):
    model = model_of(device)
    with pytest.raises(ValueError, match="exceed the model's 128 positions"):
        model.generate([[1] * 120], 9)
    with pytest.raises(ValueError, match="non-empty"):
        model.generate([[1], []], 2)
    with pytest.raises(ValueError, match="paged cache is read by the book's kernels"):
        model.generate(PROMPTS, 2, attention_impl="sdpa", cache="paged")
    with pytest.raises(ValueError, match="attention_impl"):
        model.generate(PROMPTS, 2, attention_impl="flash")
    with pytest.raises(ValueError, match="one entry per layer"):
        DecoderConfig(strides=(2,))
    # once torch's own errors, from deep inside
    for n in (0, -3, 2.0):
        with pytest.raises(ValueError, match="max_new_tokens must be a whole number"):
            model.generate(PROMPTS, n)
    with pytest.raises(ValueError, match="block_size must be a whole number >= 1"):
        model.generate(PROMPTS, 2, cache="paged", block_size=0)
    for token in (model.cfg.vocab, -1):
        with pytest.raises(ValueError, match=f"prompt 1 holds token {token}, outside "
                                             f"the vocabulary of {model.cfg.vocab}"):
            model.generate([[1, 2], [3, token]], 2)


def test_the_stand_in_checkpoint_refuses_a_file_for_its_folder(tmp_path):
    file = tmp_path / "gpt2"
    file.write_text("not a folder")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        ab.models.gpt2_stand_in(file)


def test_decoder_trains_with_sdpa_and_generates_with_the_kernels(device):
    data, chars = ab.models.encode("abcabcabd" * 40)
    torch.manual_seed(0)
    model = Decoder(DecoderConfig(vocab=len(chars), max_len=32)).to(device)
    losses = ab.models.fit(model, data, steps=60, context=16,
                           forward=lambda x: model(x, attention_impl="sdpa"))
    assert losses[-1] < 0.5 * losses[0]
    model.eval()
    prompt = data[:5].tolist()
    assert torch.equal(model.generate([prompt], 8),
                       reference_tokens(model, [prompt], 8))


# -- Hugging Face transformers ---------------------------------------------------------
transformers = pytest.importorskip("transformers")


def gpt2(device, seed=0, layers=2):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=97, n_positions=64, n_embd=64,
                                  n_layer=layers, n_head=2, initializer_range=0.3,
                                  bos_token_id=0, eos_token_id=96)
    return transformers.GPT2LMHeadModel(cfg).eval().to(device)


def hf_generate(model, impl, ids, mask, n=10):
    model.set_attn_implementation(impl)
    return model.generate(ids, attention_mask=mask, max_new_tokens=n,
                          min_new_tokens=n, do_sample=False, pad_token_id=0)


def test_registration_round_trip():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    assert ab.models.register_hf() == "attnbook"
    assert AttentionInterface()["attnbook"] is ab.models.hf_attention
    assert "attnbook" in AttentionMaskInterface()
    cfg = gpt2("cpu").config
    model = transformers.GPT2LMHeadModel._from_config(cfg,
                                                       attn_implementation="attnbook")
    assert model.config._attn_implementation == "attnbook"


@pytest.mark.parametrize("seed", [0, 1])
def test_hf_gpt2_greedy_matches_sdpa_with_left_padding(seed, device):
    ab.models.register_hf()
    model = gpt2(device, seed)
    ids = torch.tensor([[0, 0, 0, 5, 9, 12], [1, 2, 3, 4, 5, 6], [0, 7, 7, 8, 2, 4]],
                       device=device)
    mask = (torch.arange(6, device=device)
            >= torch.tensor([[3], [0], [1]], device=device)).long()
    want = hf_generate(model, "sdpa", ids, mask)
    assert len(set(want[:, 6:].flatten().tolist())) > 3
    assert torch.equal(hf_generate(model, "attnbook", ids, mask), want)


@pytest.mark.parametrize("padded", [False, True])
def test_hf_llama_with_grouped_heads_matches_sdpa(padded, device):
    """Rotary positions and 4 query heads sharing one kv head (the decode kernel's
    grouped path)."""
    ab.models.register_hf()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=128,
                                   intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=1,
                                   max_position_embeddings=64, initializer_range=0.3,
                                   bos_token_id=0, eos_token_id=96, pad_token_id=0)
    model = transformers.LlamaForCausalLM(cfg).eval().to(device)
    ids = torch.tensor([[0, 0, 5, 9, 12, 3], [1, 2, 3, 4, 5, 6]], device=device)
    mask = (torch.arange(6, device=device)
            >= torch.tensor([[2 if padded else 0], [0]], device=device)).long()
    want = hf_generate(model, "sdpa", ids, mask)
    assert len(set(want[:, 6:].flatten().tolist())) > 3
    assert torch.equal(hf_generate(model, "attnbook", ids, mask), want)


def test_hf_routes_prompt_to_the_fused_kernel_and_steps_to_the_decode_kernel():
    # The routing, counted by mocks, is the same on every device: CPU only.
    from attnbook.models import hf
    ab.models.register_hf()
    model = gpt2("cpu", 2)
    ids = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
    with mock.patch.object(hf, "attention", wraps=hf.attention) as fused, \
         mock.patch.object(hf, "decode_attention",
                           wraps=hf.decode_attention) as decode:
        got = hf_generate(model, "attnbook", ids, torch.ones_like(ids), n=6)
    assert fused.call_count == 2 and decode.call_count == 5 * 2
    assert all(c.kwargs["is_causal"] for c in fused.call_args_list)
    assert torch.equal(got, hf_generate(model, "sdpa", ids, torch.ones_like(ids), 6))


def test_the_hub_path_of_chapter_10_on_a_stand_in_checkpoint(tmp_path, capfd, device):
    """Chapter 10 loads GPT-2 from the Hub where it is reachable: load_causal_lm,
    from_pretrained of a model and its tokenizer, left padding, greedy generation the
    same on both implementations. Here that path loads a checkpoint written as the
    Hub's was, with no progress bar on stderr."""
    ab.models.register_hf()
    folder = ab.models.gpt2_stand_in(tmp_path / "gpt2")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in (tmp_path / "gpt2").iterdir()}
    model, tokenizer = ab.models.load_causal_lm(folder)
    assert not model.training and tokenizer.padding_side == "left"
    model.to(device)
    inputs = tokenizer(["The attention mechanism", "A GPU kernel"],
                       return_tensors="pt", padding=True).to(device)
    assert (inputs["attention_mask"][1] == 0).any()
    out = {}
    for impl in ("sdpa", "attnbook"):
        model.set_attn_implementation(impl)
        out[impl] = model.generate(**inputs, max_new_tokens=12, min_new_tokens=12,
                                   do_sample=False,
                                   pad_token_id=model.config.eos_token_id)
    assert len(set(out["sdpa"][:, -12:].flatten().tolist())) > 3
    assert torch.equal(out["attnbook"], out["sdpa"])
    assert tokenizer.decode(out["sdpa"][0]).startswith("The attention mechanism")
    assert capfd.readouterr().err == ""
    again = ab.models.gpt2_stand_in(tmp_path / "again")   # the same checkpoint
    assert torch.equal(ab.models.load_causal_lm(again)[0].lm_head.weight.to(device),
                       model.lm_head.weight)


def test_hf_padding_rows_give_zeros_not_nan(device):
    q = torch.randn(2, 2, 4, 32).to(device)
    k, v = torch.randn(2, 2, 4, 32).to(device), torch.randn(2, 2, 4, 32).to(device)
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool, device=device).tril()
    mask[0, :, :, :2] = False   # sequence 0 is left-padded by two tokens
    module = torch.nn.Module()
    out, weights = ab.models.hf_attention(module, q, k, v, mask, scaling=0.25)
    assert weights is None and out.shape == (2, 4, 2, 32)
    # rows with no key
    assert torch.equal(out[0, :2], torch.zeros(2, 2, 32, device=device))
    want = attention_reference(q, k, v, attn_mask=mask, scale=0.25,
                               float64=True).transpose(1, 2)
    assert torch.allclose(out[:, 2:].double(), want[:, 2:], atol=1e-5)
    assert not math.isnan(out.sum().item())


def test_hf_refuses_dropout(device):
    with pytest.raises(NotImplementedError, match="eval"):
        ab.models.hf_attention(torch.nn.Module(),
                               *(torch.randn(1, 1, 2, 32).to(device),) * 3, None,
                               dropout=0.1)


def test_a_gpt2_prefill_with_the_books_attention_waits_for_nothing_per_layer():
    """The profile chapter 10's time to first token is read with: per layer, the book's
    attention calls no more operators than SDPA's path, one registered op in place of
    SDPA, and nothing that waits for the device (an item(), a copy back, a
    synchronisation)."""
    from attnbook.models import profiling
    model = profiling._gpt2("cpu")
    ids = torch.randint(0, model.config.vocab_size, (2, 40))
    ours, sdpa = (profiling.host_profile(model, ids, impl)
                  for impl in ("attnbook", "sdpa"))
    assert ours["waits"] == sdpa["waits"] == 0
    assert ours["ops"]["attnbook::flash_forward"][0] == 1.0
    assert "aten::scaled_dot_product_attention" not in ours["ops"]

    def aten_calls(profile):
        return sum(n for name, (n, _) in profile["ops"].items()
                   if name.startswith("aten::"))
    assert aten_calls(ours) <= aten_calls(sdpa)
    table = profiling.compare(model, ids)
    assert "waits for the device" in table and "attnbook::flash_forward" in table
