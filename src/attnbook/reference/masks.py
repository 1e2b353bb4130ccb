"""Every mask the book uses, built in one place.

A mask answers one question: may query ``i`` attend key ``j``?  Kernels and the
reference ask this module; tests compare against it.  Positions are aligned to the
bottom-right: with ``Sq`` queries and ``Sk`` keys, query ``i`` sits at position
``i + Sk - Sq`` of the key sequence (the last query is the newest token).  That is the
alignment FlashAttention >= 2.1 and a KV-cache decode need.  PyTorch's
``scaled_dot_product_attention(is_causal=True)`` aligns top-left instead (query ``i``
sees keys ``j <= i``); the two agree only when ``Sq == Sk``.

Rules (all combine by AND):

* causal (``is_causal``): ``j <= i + Sk - Sq``
* strided: ``j % stride == 0``
* window ``w``: ``|i + Sk - Sq - j| < w`` (with causal: the ``w`` newest keys)
* key lengths ``L[b]``: ``j < L[b]`` (padding at the end of each sequence)
* ``attn_mask``: boolean (True = may attend, as in SDPA) or additive float,
  broadcastable to ``[B, H, Sq, Sk]``.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..args.attention import check_attn_mask, takes_is_causal

__all__ = ["allowed", "bias", "cases", "flex_mask_mod", "kind_options", "MaskCase",
           "MASK_KINDS"]

MASK_KINDS = ("none", "causal", "key_padding", "additive", "boolean", "strided",
              "strided_causal", "window", "window_causal")


def _positions(sq: int, sk: int, rows: slice, cols: slice, device=None):
    i = torch.arange(sq, device=device)[rows].view(-1, 1) + (sk - sq)
    j = torch.arange(sk, device=device)[cols].view(1, -1)
    return i, j


def _check_sizes(stride, window):
    if stride is not None and (not isinstance(stride, int) or stride < 1):
        raise ValueError(f"stride must be a positive int, got {stride!r}")
    if window is not None and (not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be a positive int, got {window!r}")


@takes_is_causal
def allowed(sq: int, sk: int, *, is_causal: bool = False, stride: int | None = None,
            window: int | None = None, key_lengths: torch.Tensor | None = None,
            device=None, rows: slice = slice(None),
            cols: slice = slice(None)) -> torch.Tensor:
    """Boolean tensor, True where query i may attend key j.

    Shape ``[1, 1, Sq, Sk]``, or ``[B, 1, Sq, Sk]`` when ``key_lengths`` (shape ``[B]``)
    is given; only the tile ``[rows, cols]`` of it if those are given (a tiled algorithm
    asks about one tile at a time).  ``attn_mask`` is not part of this: it is data, see
    :func:`bias`.
    """
    _check_sizes(stride, window)
    i, j = _positions(sq, sk, rows, cols, device)
    ok = torch.ones(i.shape[0], j.shape[1], dtype=torch.bool, device=device)
    if is_causal:
        ok &= j <= i
    if stride is not None:
        ok &= (j % stride) == 0
    if window is not None:
        ok &= (i - j).abs() < window
    ok = ok.view(1, 1, *ok.shape)
    if key_lengths is not None:
        if key_lengths.dim() != 1:
            raise ValueError("key_lengths must have shape [B], "
                             f"got {tuple(key_lengths.shape)}")
        lengths = key_lengths.to(device=ok.device).view(-1, 1, 1, 1)
        ok = ok & (j.view(1, 1, 1, -1) < lengths)
    return ok


def flex_mask_mod(sq: int, sk: int, *, is_causal: bool = False,
                  stride: int | None = None, window: int | None = None,
                  key_lengths: torch.Tensor | None = None, align: str = "bottom_right",
                  relative_stride: bool = False):
    """The same rules as a ``mask_mod`` of PyTorch's FlexAttention
    (``torch.nn.attention.flex_attention``): ``mod(b, h, q_idx, kv_idx)`` is True where
    query ``q_idx`` may attend key ``kv_idx``, for ``create_block_mask(mod, B, H, Sq,
    Sk)``. Two variants the kernels do not take: ``align="top_left"`` places query i at
    key position i (SDPA's ``is_causal``), and ``relative_stride`` is the Sparse
    Transformer's strided pattern, ``(i - j) % stride == 0``, in place of the book's
    ``j % stride == 0``."""
    if align not in ("bottom_right", "top_left"):
        raise ValueError(f"align must be 'bottom_right' or 'top_left', got {align!r}")
    _check_sizes(stride, window)
    shift = sk - sq if align == "bottom_right" else 0

    def mod(b, h, q_idx, kv_idx):
        i = q_idx + shift   # the query's position among the keys
        ok = kv_idx >= 0
        if is_causal:
            ok = ok & (kv_idx <= i)
        if stride is not None:
            ok = ok & ((i - kv_idx if relative_stride else kv_idx) % stride == 0)
        if window is not None:
            ok = ok & ((i - kv_idx).abs() < window)
        if key_lengths is not None:
            ok = ok & (kv_idx < key_lengths[b])
        return ok
    return mod


@takes_is_causal
def bias(b: int, h: int, sq: int, sk: int, *, attn_mask: torch.Tensor | None = None,
         is_causal: bool = False, stride: int | None = None, window: int | None = None,
         key_lengths: torch.Tensor | None = None, dtype=torch.float32, device=None,
         rows: slice = slice(None), cols: slice = slice(None)) -> torch.Tensor:
    """The additive score bias of every rule together: 0 or the additive mask where
    attention is allowed, -inf where it is not.  Broadcastable to ``[B, H, Sq, Sk]``, or
    to the tile ``[rows, cols]`` of it."""
    ok = allowed(sq, sk, is_causal=is_causal, stride=stride, window=window,
                 key_lengths=key_lengths, device=device, rows=rows, cols=cols)
    out = torch.zeros(ok.shape, dtype=dtype, device=device)
    if attn_mask is not None:
        check_attn_mask(attn_mask, b, h, sq, sk)
        m = attn_mask.to(device)
        # a view: nothing is copied
        m = m.expand(*m.shape[:-2], sq, sk)[..., rows, cols]
        if m.dtype == torch.bool:
            ok = ok & m
        else:
            out = out + m.to(dtype)
    return out.masked_fill(~ok, float("-inf"))


class MaskCase(NamedTuple):
    name: str
    options: dict   # the mask's keywords, for every attention function of the book
    sdpa_mask: torch.Tensor | None   # the same mask for torch's SDPA: boolean (True =
    # may attend) or additive, broadcastable to [B, H, Sq, Sk]; None: no mask


def cases(b: int, h: int, sq: int, sk: int, *, dtype=torch.float32, device=None,
          seed: int = 9) -> list[MaskCase]:
    """One case of each kind of mask the kernels take, in this order: none, causal,
    key padding (every other sequence half its keys), boolean, additive (in
    ``dtype``), window (5), causal with stride 3. Tensors on ``device``, drawn from
    ``seed``: the tests' and the chapters' one source of masks."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([sk // (1 + i % 2) for i in range(b)], device=device)
    boolean = (torch.rand(b, 1, sq, sk, generator=g) > 0.3).to(device)
    additive = torch.randn(1, h, sq, sk, generator=g).to(dtype).to(device)
    out = [MaskCase("none", {}, None)]
    for name, options in (("causal", dict(is_causal=True)),
                          ("key padding", dict(key_lengths=lengths)),
                          ("boolean", dict(attn_mask=boolean)),
                          ("additive", dict(attn_mask=additive)),
                          ("window", dict(window=5)),
                          ("causal stride", dict(is_causal=True, stride=3))):
        mask = options.get("attn_mask")
        if mask is None:
            mask = allowed(sq, sk, device=device, **options)
        out.append(MaskCase(name, options, mask))
    return out


def kind_options(kind: str, b: int, h: int, sq: int, sk: int, *, device=None,
                 seed: int = 1) -> dict:
    """The keywords of one mask of ``kind`` (:data:`MASK_KINDS`) for [B, H, Sq, Sk]
    scores, for every attention function of the book: key lengths Sk, Sk - 3, Sk - 6,
    … (at least 0), an additive [B, 1, Sq, Sk] or boolean [1, H, Sq, Sk] mask drawn
    from ``seed``, stride 3 (2 with causal), window 3 (4 with causal). :func:`cases`
    is the same kinds with an SDPA mask beside each."""
    g = torch.Generator().manual_seed(seed)
    if kind == "none":
        return {}
    if kind == "causal":
        return dict(is_causal=True)
    if kind == "key_padding":
        return dict(key_lengths=torch.tensor([max(0, sk - 3 * i) for i in range(b)],
                                             device=device))
    if kind == "additive":
        return dict(attn_mask=torch.randn(b, 1, sq, sk, generator=g).to(device))
    if kind == "boolean":
        return dict(attn_mask=(torch.rand(1, h, sq, sk, generator=g) > 0.4).to(device))
    if kind == "strided":
        return dict(stride=3)
    if kind == "strided_causal":
        return dict(stride=2, is_causal=True)
    if kind == "window":
        return dict(window=3)
    if kind == "window_causal":
        return dict(window=4, is_causal=True)
    raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
