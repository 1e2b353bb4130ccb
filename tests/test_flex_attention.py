"""PyTorch's FlexAttention, the tool readers reach for to write a mask, expresses each
of the book's masks (ab.masks.flex_mask_mod) and gives what the book's kernels give on
the CPU; SDPA's causal_lower_right is the book's causal alignment, and the two variants
the kernels take only as attn_mask (top-left causal, the Sparse Transformer's relative
stride) agree too."""
import warnings

import pytest
import torch

import attnbook as ab
from attnbook.reference import attention_reference, masks

flex = pytest.importorskip("torch.nn.attention.flex_attention")
from torch.nn.attention.bias import causal_lower_right  # noqa: E402

B, H, HKV, D = 2, 4, 2, 32


def flex_attention(q, k, v, mod):
    block_mask = flex.create_block_mask(mod, q.shape[0], None, q.shape[2], k.shape[2],
                                        device="cpu")
    with warnings.catch_warnings():   # eager: the unfused implementation, as wanted
        warnings.simplefilter("ignore", UserWarning)
        return flex.flex_attention(q, k, v, block_mask=block_mask,
                                   enable_gqa=q.shape[1] != k.shape[1])


def inputs(sq, sk, hkv=H, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, sq, D, generator=g),
            torch.randn(B, hkv, sk, D, generator=g),
            torch.randn(B, hkv, sk, D, generator=g))


RULES = {
    "causal": dict(is_causal=True),
    "window": dict(window=5),
    "window causal": dict(window=4, is_causal=True),
    "stride": dict(stride=3),
    "stride causal": dict(stride=2, is_causal=True),
    "key lengths": dict(key_lengths=torch.tensor([29, 6])),
    "key lengths causal": dict(key_lengths=torch.tensor([3, 20]), is_causal=True),
}


@pytest.mark.parametrize("hkv", [H, HKV], ids=["mha", "gqa"])
@pytest.mark.parametrize("sq, sk", [(19, 31), (31, 19), (1, 23)])
@pytest.mark.parametrize("rule", RULES)
def test_flex_attention_expresses_each_of_the_books_masks(rule, sq, sk, hkv):
    q, k, v = inputs(sq, sk, hkv)
    options = RULES[rule]
    got = flex_attention(q, k, v, masks.flex_mask_mod(sq, sk, **options))
    ours = ab.attention(q, k, v, enable_gqa=hkv != H, **options)
    exact = attention_reference(q.double(), k.double(), v.double(), **options)
    # rows with no key at all (Sq > Sk, causal; a length of 3): zeros in all three
    torch.testing.assert_close(got.double(), exact, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(ours, got, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("sq, sk", [(19, 31), (31, 31)])
def test_the_variants_the_kernels_take_as_a_boolean_mask(sq, sk):
    q, k, v = inputs(sq, sk)
    top_left = torch.ones(sq, sk, dtype=torch.bool).tril()
    got = flex_attention(q, k, v, masks.flex_mask_mod(sq, sk, is_causal=True,
                                                      align="top_left"))
    torch.testing.assert_close(got, ab.attention(q, k, v, attn_mask=top_left),
                               atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(got, torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True), atol=2e-6, rtol=1e-5)
    # the Sparse Transformer's strided pattern, (i - j) % 3 == 0, causal
    i = torch.arange(sq).view(-1, 1) + sk - sq
    j = torch.arange(sk).view(1, -1)
    relative = ((i - j) % 3 == 0) & (j <= i)
    got = flex_attention(q, k, v, masks.flex_mask_mod(sq, sk, is_causal=True, stride=3,
                                                      relative_stride=True))
    torch.testing.assert_close(got, ab.attention(q, k, v, attn_mask=relative),
                               atol=2e-6, rtol=1e-5)
    book = ab.attention(q, k, v, is_causal=True, stride=3)
    assert not torch.allclose(got, book)   # the two stride definitions differ


def test_sdpa_aligns_bottom_right_with_causal_lower_right():
    q, k, v = inputs(19, 31)
    torch.testing.assert_close(
        torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=causal_lower_right(19, 31)),
        ab.attention(q, k, v, is_causal=True), atol=2e-6, rtol=1e-5)


def test_flex_mask_mod_refuses_bad_rules():
    with pytest.raises(ValueError, match="align"):
        masks.flex_mask_mod(4, 4, align="bottom-right")
    with pytest.raises(ValueError, match="stride must be a positive int"):
        masks.flex_mask_mod(4, 4, stride=0)
