"""Chapter 6's tile-by-tile FlashAttention-2 against the float64 reference. Pure
PyTorch, no kernel: on the CPU only."""
import itertools
import math

import pytest
import torch

import attnbook as ab
from attnbook.reference.flash_tiles import flash_attention_tiles
from test_attention import SHAPES, inputs, mask_options

# tiles of one element, tiles that do not divide S
TILES = [(1, 1), (4, 3), (16, 16), (7, 64)]


@pytest.mark.parametrize("shape,kind,tiles",
                         list(itertools.product(SHAPES, ab.masks.MASK_KINDS, TILES)))
def test_tiles_match_reference(shape, kind, tiles):
    q, k, v = (t.double() for t in inputs(shape, "cpu"))
    ref = mask_options(kind, shape, "cpu")
    o, lse = flash_attention_tiles(q, k, v, block_q=tiles[0], block_k=tiles[1], **ref)
    want_o, want_lse = ab.attention_reference(q, k, v, float64=True, return_lse=True,
                                              **ref)
    torch.testing.assert_close(o, want_o, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(lse, want_lse, rtol=1e-10, atol=1e-12)


def test_large_scores_and_empty_rows():
    # scores ~ ±1e4 in float32
    q, k, v = inputs((1, 2, 2, 20, 6, 16), "cpu", seed=2, magnitude=30.0)
    o, lse = flash_attention_tiles(q, k, v, is_causal=True, block_q=4, block_k=4)
    want = ab.attention_reference(q, k, v, is_causal=True, float64=True)
    assert (torch.isfinite(o).all() and (o[:, :, :14] == 0).all()
            and torch.isneginf(lse[:, :, :14]).all())
    torch.testing.assert_close(o.double(), want, rtol=1e-4, atol=1e-4)


def test_paper_typo_is_wrong_and_the_fix_is_right():
    # One query, two keys in two tiles: scores 0 then 2, values 1 then 3.
    q = torch.tensor([[[[1.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[0.0], [2.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[1.0], [3.0]]]], dtype=torch.float64)
    fixed, _ = flash_attention_tiles(q, k, v, scale=1.0, block_k=1)
    exact = (1 + 3 * math.e ** 2) / (1 + math.e ** 2)
    assert math.isclose(fixed.item(), exact, rel_tol=1e-12)
    typo, _ = flash_attention_tiles(q, k, v, scale=1.0, block_k=1, paper_typo=True)
    # 1/exp(-inf - m) = inf times the zero initial output
    assert math.isnan(typo.item())


def test_trace_records_every_tile_and_skips_masked_ones():
    q, k, v = inputs((1, 1, 1, 10, 10, 8), "cpu")
    trace = []
    o, _ = flash_attention_tiles(q, k, v, is_causal=True, block_q=4, block_k=4,
                                 trace=trace)
    assert [(t["q_tile"], t["k_tile"]) for t in trace] == [(i, j) for i in range(3)
                                                          for j in range(3)]
    # above the diagonal
    assert [t["k_tile"] for t in trace if t["skipped"]] == [1, 2, 2]
    last = [t for t in trace if t["k_tile"] == 2]
    torch.testing.assert_close(torch.cat([t["partial"] for t in last]), o[0, 0])
