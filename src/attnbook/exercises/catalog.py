"""The exercises of chapters 2–12 (two in each chapter from 2 to 11): how each is
called and checked.
Its C++ lives in the chapter's folder, ``exercises/chNN/``, one file per part:

    <name>.cu             the skeleton: the kernel the reader completes
    <name>.solution.cu    a solution (the notebook shows it in a collapsed cell)
    <name>.launcher.cu    the host launcher appended to the reader's text
    <name>.wrapper.cpp    the torch-facing C++ (see attnbook.compile)

The notebooks show the skeleton and the solution verbatim (a test keeps them so).
Outputs start as NaN, so a value the kernel never writes shows as wrong."""
from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Callable

import torch

from ..reference import masks

__all__ = ["Exercise", "Planted", "EXERCISES", "EXERCISE_DIR"]

EXERCISE_DIR = pathlib.Path(__file__).resolve().parent


@dataclass(frozen=True)
class Planted:
    """A wrong answer the grader must reject: the solution with ``old`` replaced by
    ``new``, reported with ``says`` in the grader's message."""
    what: str
    old: str
    new: str
    says: str


@dataclass(frozen=True)
class Exercise:
    name: str
    chapter: str       # "02" … "12"
    function: str      # the wrapper's function
    cases: Callable    # () -> [(description, [inputs])]
    reference: Callable
    planted: Planted
    rtol: float = 1e-5
    atol: float = 1e-6
    arch: str | None = None   # "sm_90a": built for it, on the emulator off such a GPU

    def _part(self, suffix: str) -> str:
        return (EXERCISE_DIR / f"ch{self.chapter}" / f"{self.name}{suffix}").read_text()

    @property
    def skeleton(self) -> str:
        return self._part(".cu")

    @property
    def solution(self) -> str:
        return self._part(".solution.cu")

    @property
    def launcher(self) -> str:
        return self._part(".launcher.cu")

    @property
    def wrapper(self) -> str:
        return self._part(".wrapper.cpp")


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _nan_at(x: torch.Tensor, *index) -> torch.Tensor:
    """``x`` with a NaN at ``index``."""
    x[index] = float("nan")
    return x


# ---- chapter 2 -----------------------------------------------------------------------
# a grid-stride loop
RELU = Exercise(
    name="relu_grid_stride",
    chapter="02",
    function="relu_of",
    cases=lambda: [(f"n = {n}", [_randn(n, seed=n)]) for n in (1, 255, 256, 257, 1000)],
    reference=lambda x: x.clamp(min=0),
    planted=Planted("no grid-stride loop",
                    "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i "
                    "+= step)",
                    "int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n)",
                    "case n = 257"),
)


QK_SCORES = Exercise(
    name="qk_scores",
    chapter="02",
    function="qk_scores_of",
    cases=lambda: [(f"Sq = {sq}, Sk = {sk}, D = {d}",
                    [_randn(sq, d, seed=sq), _randn(sk, d, seed=sk + 1)])
                   for sq, sk, d in ((1, 1, 1), (5, 17, 8), (40, 33, 64))],
    reference=lambda q, k: (q.double() @ k.double().T / q.shape[1] ** 0.5).float(),
    rtol=1e-5, atol=1e-5,
    planted=Planted("query and key indices swapped",
                    "q[i * D + d] * k[j * D + d]",
                    "q[j * D + d] * k[i * D + d]",
                    "Sq = 5, Sk = 17"),
)


# ---- chapter 3 -----------------------------------------------------------------------
# a block reduction in shared memory
ROW_MAX = Exercise(
    name="row_max",
    chapter="03",
    function="row_max_of",
    cases=lambda: [(f"[{r}, {n}]", [_randn(r, n, seed=n)])
                   for r, n in ((1, 1), (3, 100), (2, 256), (2, 700))]
    + [("[2, 300], a NaN in row 1", [_nan_at(_randn(2, 300, seed=3), 1, 123)])],
    reference=lambda x: x.amax(-1),
    planted=Planted("no barrier between the halving steps",
                    "    if (t < half) buf[t] = max_nan(buf[t], buf[t + half]);\n    "
                    "__syncthreads();",
                    "    if (t < half) buf[t] = max_nan(buf[t], buf[t + half]);",
                    "under thread order"),
)


WARP_SUM = Exercise(
    name="warp_sum",
    chapter="03",
    function="warp_sum_of",
    cases=lambda: [(f"n = {n}", [_randn(3, n, seed=n)]) for n in (1, 31, 32, 1000)],
    reference=lambda x: x.double().sum(-1).float(),
    rtol=1e-5, atol=1e-5,
    planted=Planted("the reduction starts at offset 8",
                    "int offset = 16;",
                    "int offset = 8;",
                    "n = 31"),
)


# ---- chapter 4 -----------------------------------------------------------------------
# a transpose through a shared-memory tile
TRANSPOSE = Exercise(
    name="transpose_tile",
    chapter="04",
    function="transpose_of",
    cases=lambda: [(f"[{m}, {n}]", [_randn(m, n, seed=m)])
                   for m, n in ((1, 1), (32, 32), (33, 70), (64, 5))],
    reference=lambda x: x.t().contiguous(),
    rtol=0.0, atol=0.0,
    planted=Planted("no barrier between loading the tile and reading it",
                    "  __syncthreads();\n",
                    "",
                    "under thread order"),
)


TILED_MATMUL = Exercise(
    name="tiled_matmul",
    chapter="04",
    function="tiled_matmul_of",
    cases=lambda: [(f"M = {m}, N = {n}, K = {k}",
                    [_randn(m, k, seed=m), _randn(k, n, seed=n + 1)])
                   for m, n, k in ((1, 1, 1), (17, 5, 33), (40, 48, 64))],
    reference=lambda a, b: (a.double() @ b.double()).float(),
    rtol=1e-4, atol=1e-5,
    planted=Planted("no barrier before the next tile overwrites the shared tiles",
                    "acc += As[ty][kk] * Bs[kk][tx];\n    __syncthreads();\n",
                    "acc += As[ty][kk] * Bs[kk][tx];\n",
                    "under thread order"),
)


# ---- chapter 5 -----------------------------------------------------------------------
# a mask rule
WINDOW = Exercise(
    name="causal_window",
    chapter="05",
    function="window_bias_of",
    cases=lambda: [(f"Sq = {sq}, Sk = {sk}, w = {w}", [torch.empty(0), sq, sk, w])
                   for sq, sk, w in ((5, 5, 2), (3, 10, 4), (10, 4, 3), (1, 70, 65))],
    reference=lambda like, sq, sk, w: masks.bias(1, 1, sq, sk, is_causal=True, window=w,
                                                 device=like.device)[0, 0],
    rtol=0.0, atol=0.0,
    planted=Planted("positions aligned top-left",
                    "const int pos = i + Sk - Sq;",
                    "const int pos = i;",
                    "Sq = 3, Sk = 10"),
)


PADDING_MASK = Exercise(
    name="key_padding",
    chapter="05",
    function="key_padding_of",
    cases=lambda: [(f"B = {len(ls)}, Sq = {sq}, Sk = {sk}, lengths {ls}",
                    [_randn(len(ls), sq, sk, seed=sk),
                     torch.tensor(ls, dtype=torch.int32)])
                   for sq, sk, ls in ((1, 1, [1]), (3, 10, [10, 4, 0]),
                                      (5, 70, [65, 70]))],
    reference=lambda s, lengths: s.masked_fill(
        torch.arange(s.shape[2], device=s.device) >= lengths.view(-1, 1, 1).long(),
        float("-inf")),
    rtol=0.0, atol=0.0,
    planted=Planted("the last real key masked too",
                    "j < lengths[b]",
                    "j < lengths[b] - 1",
                    "Sq = 1, Sk = 1"),
)


# ---- chapter 6 -----------------------------------------------------------------------
def _lse_rows(n, seed):
    x = _randn(4, n, seed=seed) * 20
    x[1] = float("-inf")                    # a row with no admissible key
    x[2, ::2] = float("-inf")               # masked keys among the others
    return x


# the log-sum-exp, online
ROW_LOGSUMEXP = Exercise(
    name="row_logsumexp",
    chapter="06",
    function="row_logsumexp_of",
    cases=lambda: [(f"n = {n}", [_lse_rows(n, n)]) for n in (1, 7, 300)],
    reference=lambda x: torch.logsumexp(x.double(), -1).float(),
    rtol=1e-5, atol=1e-5,
    planted=Planted("no guard for a row of -inf",
                    "    if (xr[j] == -INFINITY) continue;   // exp(-inf - m) = 0, "
                    "even when m = -inf\n",
                    "",
                    "n = 1"),
)


def _tile_scores(r, n, seed):
    s = _randn(r, n, seed=seed) * 20
    s[0, : min(n, 4)] = float("-inf")      # a first tile with no admissible key
    return s


def _tile_reference(s, v, bc):
    """[acc | m | l] after every tile of Algorithm 1, in float64."""
    s, v = s.double(), v.double()
    m = s.amax(-1)
    shift = torch.where(torch.isneginf(m), 0.0, m)
    p = torch.exp(s - shift[:, None])
    return torch.cat([p @ v, m[:, None], p.sum(-1, keepdim=True)], 1).float()


TILE_UPDATE = Exercise(
    name="tile_update",
    chapter="06",
    function="tile_update_of",
    cases=lambda: [(f"R = {r}, n = {n}, D = {d}, Bc = {bc}",
                    [_tile_scores(r, n, seed=n), _randn(n, d, seed=d), bc])
                   for r, n, d, bc in ((1, 1, 1, 1), (4, 17, 8, 4), (70, 40, 64, 16))],
    reference=_tile_reference,
    rtol=1e-4, atol=1e-5,
    planted=Planted("the paper's inverted rescaling",
                    "const float alpha = expf(m[r] - m_new);",
                    "const float alpha = expf(m_new - m[r]);",
                    "R = 4"),
)


# ---- chapter 7 -----------------------------------------------------------------------
# the online softmax of one row, with its values
ONLINE_ROW = Exercise(
    name="online_row",
    chapter="07",
    function="online_row_of",
    cases=lambda: [(f"R = {r}, n = {n}, D = {d}",
                    [_randn(r, n, seed=n) * scale, _randn(n, d, seed=d)])
                   for r, n, d, scale in ((1, 1, 1, 1.0), (3, 17, 8, 1.0),
                                          (70, 40, 64, 30.0))],
    reference=lambda s, v: torch.softmax(s.double(), -1).float() @ v,
    rtol=1e-4, atol=1e-5,
    planted=Planted("the paper's inverted rescaling",
                    "expf(m - m_new), p",
                    "expf(m_new - m), p",
                    "R = 1"),
)


def _causal_tiles_reference(like, sq, sk, br, bc):
    """One past the last key tile that a query tile's last row may attend."""
    last_rows = torch.tensor([min(sq, t + br) - 1 for t in range(0, sq, br)])
    keys = (last_rows + sk - sq + 1).clamp(0, sk)       # keys 0 .. pos admitted
    return ((keys + bc - 1) // bc).float().to(like.device)


TILE_RANGE = Exercise(
    name="causal_tiles",
    chapter="07",
    function="causal_tiles_of",
    cases=lambda: [(f"Sq = {sq}, Sk = {sk}, Br = {br}, Bc = {bc}",
                    [torch.empty(0), sq, sk, br, bc])
                   for sq, sk, br, bc in ((1, 1, 64, 32), (100, 100, 64, 32),
                                          (10, 200, 4, 16), (200, 50, 32, 8))],
    reference=_causal_tiles_reference,
    rtol=0.0, atol=0.0,
    planted=Planted("causal aligned top-left",
                    "last_row + Sk - Sq + 1",
                    "last_row + 1",
                    "Sq = 10, Sk = 200"),
)


# ---- chapter 8 -----------------------------------------------------------------------
# a row reduction on an mma.sync accumulator fragment
FRAGMENT_ROW_MAX = Exercise(
    name="fragment_row_max",
    chapter="08",
    function="fragment_row_max_of",
    cases=lambda: [(f"T = {n}", [_randn(n, 16, 8, seed=n) * 10]) for n in (1, 3, 40)],
    reference=lambda x: x.amax(-1),
    planted=Planted("the second shuffle crosses into the next row group",
                    "__shfl_xor_sync(0xffffffffu, m, 2)",
                    "__shfl_xor_sync(0xffffffffu, m, 4)",
                    "T = 1"),
)


def _swizzle_reference(like, rows):
    r = torch.arange(rows).view(-1, 1)
    c = torch.arange(64).view(1, -1)
    return (r * 64 + ((c // 8) ^ (r % 8)) * 8 + c % 8).float().to(like.device)


SWIZZLE = Exercise(
    name="swizzled_offsets",
    chapter="08",
    function="swizzled_offsets_of",
    cases=lambda: [(f"rows = {r}", [torch.empty(0), r]) for r in (1, 8, 70)],
    reference=_swizzle_reference,
    rtol=0.0, atol=0.0,
    planted=Planted("XOR with the row modulo 4",
                    "(col / 8) ^ (row % 8)",
                    "(col / 8) ^ (row % 4)",
                    "rows = 8"),
)


# ---- chapter 9 -----------------------------------------------------------------------
def _splits(rows, splits, d, seed):
    o = _randn(rows, splits, d, seed=seed)
    lse = _randn(rows, splits, seed=seed + 1) * 10
    lse[0, 1:] = float("-inf")              # splits that saw no key
    lse[1] = float("-inf")                  # a row with no key at all
    return [o, lse]


def _merge_reference(o, lse):
    total = torch.logsumexp(lse.double(), -1, keepdim=True)
    w = torch.exp(lse.double() - total).nan_to_num(0.0)
    return (w[..., None] * o.double()).sum(1).float()


# merging the partial results of split-K
COMBINE_SPLITS = Exercise(
    name="combine_splits",
    chapter="09",
    function="combine_splits_of",
    cases=lambda: [(f"R = {r}, S = {sp}, D = {d}", _splits(r, sp, d, seed=sp))
                   for r, sp, d in ((2, 1, 1), (3, 4, 32), (9, 16, 128))],
    reference=_merge_reference,
    rtol=1e-5, atol=1e-5,
    planted=Planted("empty splits not guarded",
                    "  if (m != -INFINITY)\n",
                    "",
                    "R = 2, S = 1"),
)


def _page_table(b, blocks, seed):
    """A block table whose pages are a shuffled slice of a pool of 2·b·blocks pages."""
    pool = torch.randperm(2 * b * blocks, generator=torch.Generator().manual_seed(seed))
    return pool[: b * blocks].view(b, blocks).int()


def _paged_reference(table, lengths, bs):
    b, blocks = table.shape
    p = torch.arange(blocks * bs, device=table.device)
    slot = table.long()[:, p // bs] * bs + p % bs
    return torch.where(p < lengths.long()[:, None], slot, -1).float()


PAGED_SLOTS = Exercise(
    name="paged_slots",
    chapter="09",
    function="paged_slots_of",
    cases=lambda: [(f"B = {len(ls)}, pages of {bs}, lengths {ls}",
                    [_page_table(len(ls), blocks, seed=bs),
                     torch.tensor(ls, dtype=torch.int32), bs])
                   for ls, blocks, bs in (([1], 1, 1), ([5, 16, 0], 4, 4),
                                          ([33, 7], 3, 16))],
    reference=_paged_reference,
    rtol=0.0, atol=0.0,
    planted=Planted("the page indexed by the position, not the page number",
                    "block_table[b * max_blocks + p / bs]",
                    "block_table[b * max_blocks + p % bs]",
                    "lengths [5, 16, 0]"),
)


# ---- chapter 10 ----------------------------------------------------------------------
def _tied_logits(B, V, seed):
    """Logits with the row maximum repeated at several columns that fall to different
    threads, the lowest of them in a higher-numbered thread."""
    x = _randn(B, V, seed=seed)
    for b in range(B):
        cols = [c for c in (5 + b, 130 + b, V - 1) if c < V]
        x[b, cols] = x[b].max() + 1.0
    return x


# what a decode step does outside attention
GREEDY_ARGMAX = Exercise(
    name="greedy_argmax",
    chapter="10",
    function="greedy_argmax_of",
    cases=lambda: [(f"B = {b}, V = {v}", [_tied_logits(b, v, seed=v)])
                   for b, v in ((1, 1), (3, 97), (2, 300), (4, 5000))],
    reference=lambda x: x.argmax(-1).float(),
    rtol=0.0, atol=0.0,
    planted=Planted("ties across threads keep the lower thread, not the lower "
                    "column",
                    " || (o == best[t] && oj < where[t])",
                    "",
                    "B = 3, V = 97"),
)


DECODE_EMBED = Exercise(
    name="decode_embed",
    chapter="10",
    function="decode_embed_of",
    cases=lambda: [(f"B = {len(pos)}, D = {d}, positions {pos}",
                    [torch.tensor(tok, dtype=torch.int32),
                     torch.tensor(pos, dtype=torch.int32),
                     _randn(50, d, seed=d), _randn(40, d, seed=d + 1)])
                   for tok, pos, d in (([7], [0], 1), ([3, 3, 49], [12, 0, 39], 70),
                                       ([0, 1], [5, 2], 128))],
    reference=lambda tok, pos, E, P: E[tok.long()] + P[pos.long()],
    rtol=0.0, atol=0.0,
    planted=Planted("every sequence at position b",
                    "P[(size_t)positions[b] * D + d]",
                    "P[(size_t)b * D + d]",
                    "positions [12, 0, 39]"),
)


# ---- chapter 11 ----------------------------------------------------------------------
def _softmax_rows(r, n, seed):
    p = torch.softmax(_randn(r, n, seed=seed) * 3, -1)
    return [p, _randn(r, n, seed=seed + 1)]


# the backward of softmax
SOFTMAX_BACKWARD = Exercise(
    name="softmax_backward",
    chapter="11",
    function="softmax_backward_of",
    cases=lambda: [(f"R = {r}, n = {n}", _softmax_rows(r, n, seed=n))
                   for r, n in ((1, 1), (3, 17), (70, 200))],
    reference=lambda p, dp: (p.double() * (dp.double() - (p.double() * dp.double())
                                           .sum(-1, keepdim=True))).float(),
    rtol=1e-4, atol=1e-6,
    planted=Planted("the Jacobian's diagonal term only",
                    "pr[j] * (dpr[j] - dot)",
                    "pr[j] * dpr[j]",
                    "R = 1, n = 1"),
)


def _masked_scores(r, n, seed):
    s = _randn(r, n, seed=seed) * 5
    s[:, ::3] = float("-inf")                  # masked keys
    s[0] = float("-inf")                       # a row with no admissible key
    return [s, torch.logsumexp(s, -1)]


RECOMPUTE_P = Exercise(
    name="recompute_p",
    chapter="11",
    function="recompute_p_of",
    cases=lambda: [(f"R = {r}, n = {n}", _masked_scores(r, n, seed=n))
                   for r, n in ((1, 1), (4, 17), (30, 100))],
    reference=lambda s, lse: torch.where(
        torch.isneginf(lse)[:, None], 0.0,
        torch.exp(s.double() - lse.double()[:, None])).float(),
    rtol=1e-5, atol=1e-7,
    planted=Planted("no guard for masked scores or empty rows",
                    "x == -INFINITY || L == -INFINITY ? 0.f : ",
                    "",
                    "R = 1"),
)

# In the book's order: by chapter, then as the chapter sets them.
# ---- chapter 12 ----------------------------------------------------------------------
# a producer and a consumer on mbarriers: the parity of each wait
RING_SUM = Exercise(
    name="ring_sum",
    chapter="12",
    function="ring_sum_of",
    cases=lambda: [(f"{n} tiles", [_randn(n, 32, seed=n)]) for n in (1, 2, 7, 12)],
    reference=lambda x: x.double().sum(0).float(),
    rtol=1e-5, atol=1e-5,
    arch="sm_90a",
    planted=Planted("the wait names the tile's parity, not the fill's",
                    "mbarrier_wait(&full[s], u % 2)",
                    "mbarrier_wait(&full[s], i % 2)",
                    "deadlock"),
)


EXERCISES = {ex.name: ex for ex in sorted(
    (RELU, QK_SCORES, ROW_MAX, WARP_SUM, TRANSPOSE, TILED_MATMUL, WINDOW, PADDING_MASK,
     ROW_LOGSUMEXP, TILE_UPDATE, ONLINE_ROW, TILE_RANGE, FRAGMENT_ROW_MAX, SWIZZLE,
     COMBINE_SPLITS, PAGED_SLOTS, GREEDY_ARGMAX, DECODE_EMBED, SOFTMAX_BACKWARD,
     RECOMPUTE_P, RING_SUM), key=lambda ex: ex.chapter)}
