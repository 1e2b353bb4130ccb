"""The one input check of every public entry point: the kernels' (in
:mod:`attnbook.ops`) and the references' (here), so that all of them accept and refuse
the same arguments.

Every rule is checked here, in Python, before anything reaches a kernel: types, dtypes,
shapes, devices, ranges. Python integers are unbounded and the kernels take 32-bit ones,
so every integer is either reduced to an equivalent value that fits
(a stride or window longer than the sequence) or refused before it is narrowed.

The book's masks beyond SDPA's (``stride``, ``window``) are keywords that every function
taking masks passes on as they came (``**mask``) to :func:`attention_args` or
:func:`check_reference_args`, and from there to the kernels by name: the order of
their values is that of ``MASK_OPTIONS`` in ``kernels/mask_params.h``, read from the
header (:data:`MASK_OPTIONS`). A new scalar mask is a line there, its rule in
``mask.cuh`` and in :mod:`attnbook.reference.masks`, and its keyword here
(:data:`MASK_KEYWORDS`).
"""
from __future__ import annotations

import functools
import math
import numbers
import re
import warnings
from dataclasses import dataclass

import torch

from cuda_emulator.emulate import blank_out, join_lines

from ..toolchain.compile import KERNEL_DIR

__all__ = ["AttentionArgs", "attention_args", "check_reference_args", "check_tensor",
           "takes_is_causal", "check_mask_keywords", "MASK_OPTIONS", "MASK_KEYWORDS",
           "check_attn_mask", "check_positive_int", "check_same_device", "INT32_MAX",
           "FLOATS"]

INT32_MAX = 2**31 - 1
# meta: shapes only (the ops' fake implementations)
DEVICE_TYPES = ("cuda", "cpu", "meta")
HALF_PRECISION = (torch.float16, torch.bfloat16)
INTEGER_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def _mask_options() -> tuple[str, ...]:
    """The names of MaskParams' scalar options, in the order the kernels take their
    values: the lines of ``MASK_OPTIONS`` in ``kernels/mask_params.h``."""
    text = (KERNEL_DIR / "mask_params.h").read_text().replace("\r\n", "\n")
    text = blank_out(join_lines(text), strings=False)   # one line, comments blank
    block = re.search(r"^[ \t]*#[ \t]*define[ \t]+MASK_OPTIONS\(X\)(.*)$", text,
                      re.M)[1]
    return tuple(re.findall(r"X\(\s*[^,()]+?\s*,\s*(\w+)\s*\)", block))


MASK_OPTIONS = _mask_options()
# The book's masks beyond SDPA's, by keyword (all of MASK_OPTIONS but ``causal``, which
# is SDPA's is_causal): a positive int or None (off), and the equivalent value that
# fits in 32 bits, of (n, Sq, Sk). A stride of Sk or more admits key 0 alone; no two
# positions are more than max(Sq, Sk) apart.
MASK_KEYWORDS = {"stride": lambda n, sq, sk: min(n, max(sk, 1)),
                 "window": lambda n, sq, sk: min(n, max(sq, sk) + 1)}


def takes_is_causal(fn):
    """``fn`` spells the causal mask ``is_causal``, as
    ``torch.nn.functional.scaled_dot_product_attention`` and :func:`attnbook.attention`
    do; ``causal=``, the name some of the book's functions took before, still works
    for this release, with a DeprecationWarning."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if "causal" in kwargs:
            if "is_causal" in kwargs:
                raise TypeError(f"{fn.__name__}() takes is_causal, not both it and "
                                "causal")
            warnings.warn(f"{fn.__name__}(causal=...) is now is_causal=..., as in "
                          "scaled_dot_product_attention; causal= goes in the next "
                          "release", DeprecationWarning, stacklevel=2)
            kwargs["is_causal"] = kwargs.pop("causal")
        return fn(*args, **kwargs)
    return wrapper


def check_attn_mask(attn_mask: torch.Tensor, *shape: int) -> None:
    """Raise a clear error unless ``attn_mask`` broadcasts to ``shape``, the scores'
    ``[*batch, H, Sq, Sk]``."""
    have = tuple(attn_mask.shape)
    if attn_mask.dim() > len(shape) or any(s not in (1, w)
                                           for s, w in zip(have[::-1], shape[::-1])):
        raise ValueError(f"attn_mask of shape {have} does not broadcast to "
                         f"[*batch, H, Sq, Sk] = {list(shape)}")
    if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
        raise TypeError("attn_mask must be bool or floating point, "
                        f"got {attn_mask.dtype}")


def check_tensor(x, name: str, dtypes=(torch.float32,), min_dim: int = 0) -> None:
    """``x`` is a tensor of one of ``dtypes`` with at least ``min_dim`` dimensions, on a
    CUDA device or the CPU (where the emulator runs the kernels)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(x).__name__}")
    if x.dtype not in dtypes:
        names = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must be {names}, got {x.dtype}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, "
                         f"got shape {tuple(x.shape)}")
    if x.device.type not in DEVICE_TYPES:
        raise ValueError(f"{name} must be on a CUDA device or the CPU (the emulator), "
                         f"got {x.device}")


def check_same_device(named: dict) -> None:
    """All the tensors of ``named`` (None entries skipped) are on one device."""
    tensors = [(n, t) for n, t in named.items() if t is not None]
    first_name, first = tensors[0]
    for name, t in tensors[1:]:
        if t.device != first.device:
            raise ValueError(f"all tensors must be on one device: {name} is on "
                             f"{t.device}, {first_name} on {first.device}")


def check_positive_int(value, name: str) -> int:
    """A Python (or NumPy) integer ≥ 1, not a bool."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


@dataclass
class AttentionArgs:
    """Checked attention inputs, as the kernels take them: q [B, H, Sq, D] and k, v
    [B, Hkv, Sk, D] views (leading dims flattened into B, head dim contiguous), the mask
    as an additive float32 [B, H, Sq, Sk] view (stride 0 where it broadcasts) or None,
    key lengths as int32 [B] clamped to [0, Sk] or None, ``mask``: each of
    :data:`MASK_KEYWORDS` as an int (0 = off); :attr:`mask_options` holds ``causal``
    and ``mask`` as the kernels take them."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    bias: torch.Tensor | None
    key_lengths: torch.Tensor | None
    causal: bool
    mask: dict
    scale: float
    out_shape: tuple

    @property
    def mask_options(self) -> list[int]:
        """The mask's scalar options as every op and C++ wrapper takes them: a value
        for each name of :data:`MASK_OPTIONS`, in its order."""
        values = {"causal": int(self.causal), **self.mask}
        return [values[name] for name in MASK_OPTIONS]

    def output(self, o: torch.Tensor) -> torch.Tensor:
        """The kernel's [B, H, Sq, D] output in the shape of the caller's q."""
        return o.reshape(self.out_shape)


def _as_bhsd(x: torch.Tensor) -> torch.Tensor:
    """[*batch, H, S, D] (or [S, D], [H, S, D]) as [B, H, S, D], a view where possible;
    the head dimension made contiguous (one copy) if it is not."""
    if x.dim() == 2:
        x = x[None, None]
    elif x.dim() == 3:
        x = x[None]
    elif x.dim() > 4:
        x = x.reshape(math.prod(x.shape[:-3]), *x.shape[-3:])
    return x if x.stride(-1) == 1 or x.shape[-1] <= 1 else x.contiguous()


def _check_shapes(q, k, v, enable_gqa: bool) -> None:
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if not q.dim() == k.dim() == v.dim():
        raise ValueError("q, k and v must have the same number of dimensions: "
                         f"{shapes}")
    if k.shape != v.shape:
        raise ValueError("k and v must have the same shape [*batch, Hkv, Sk, D]: "
                         f"{shapes} "
                         "(a value head_dim other than the query's is not supported)")
    if q.shape[:-3] != k.shape[:-3] or q.shape[-1] != k.shape[-1]:
        raise ValueError("k and v must both be [*batch, Hkv, Sk, D] with q's batch "
                         f"dims {tuple(q.shape[:-3])} and D={q.shape[-1]}; "
                         f"got {shapes}")
    if q.dim() >= 3:
        h, hkv = q.shape[-3], k.shape[-3]
        if hkv == 0 and h > 0:
            raise ValueError(f"k and v have 0 heads but q has {h}: {shapes}")
        if hkv and h % hkv:
            raise ValueError(f"query heads ({h}) must be a multiple of key/value heads "
                             f"({hkv}): {shapes}")
        if h != hkv and not enable_gqa:   # as SDPA (a q in [B, S, H, D] by mistake?)
            raise ValueError(f"q has {h} heads and k, v {hkv}: grouped-query attention "
                             "needs enable_gqa=True, as in "
                             f"scaled_dot_product_attention: {shapes}")
    for name, n in (("query length", q.shape[-2]), ("key length", k.shape[-2]),
                    ("head_dim", q.shape[-1])):
        if n > INT32_MAX:
            raise ValueError(f"{name} {n} exceeds the kernels' 32-bit limit "
                             f"({INT32_MAX})")


FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def softmax_scale(scale, d: int, *, float32: bool = True) -> float:
    """The factor of q·kᵀ: ``scale``, by default 1/√d (1 when d = 0: the output is empty
    then). With ``float32``, the dtype the kernels multiply in, it must be finite there:
    1e300 would become inf and every output NaN."""
    if scale is None:
        return 1.0 / math.sqrt(d) if d else 1.0
    scale = float(scale)
    if float32 and not (math.isfinite(scale)
                        and abs(scale) <= torch.finfo(torch.float32).max):
        raise ValueError(f"scale={scale!r} is not a finite float32, the dtype the "
                         "kernels compute q·kᵀ·scale in")
    return scale


def check_mask_keywords(mask: dict) -> dict:
    """The book's masks given by keyword (``**mask`` of a function), checked: each a
    name of :data:`MASK_KEYWORDS` and a positive int or None (off). Returns those that
    are on."""
    unknown = sorted(set(mask) - set(MASK_KEYWORDS))
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}: neither an "
                        "argument of the function nor one of the masks by keyword ("
                        + ", ".join(MASK_KEYWORDS) + ")")
    return {name: check_positive_int(n, name) for name, n in mask.items()
            if n is not None}


def attention_args(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                   *, key_lengths=None, enable_gqa=True, dtypes=(torch.float32,),
                   **mask) -> AttentionArgs:
    """Check the arguments of :func:`attnbook.attention` (SDPA's, plus the book's masks:
    ``key_lengths`` and, in ``mask``, those of :data:`MASK_KEYWORDS`) and return them
    as the kernels take them. Raises TypeError, ValueError or
    NotImplementedError with a message that names the argument. ``enable_gqa``: whether
    q may have more heads than k and v (the chapters' functions and the references,
    like FlashAttention's, take grouped heads as they come)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if getattr(t, "dtype", None) in HALF_PRECISION and t.dtype not in dtypes:
            raise NotImplementedError(
                f"{name} is {t.dtype}: this path computes in float32; half precision "
                "runs on chapter 8's tensor-core kernel (ab.attention with "
                "impl='flash', or ab.flash_attention_tc)")
        check_tensor(t, name, dtypes, min_dim=2)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, "
                        f"{v.dtype}")
    _check_shapes(q, k, v, enable_gqa)
    if not isinstance(dropout_p, numbers.Real) or dropout_p != 0:
        raise NotImplementedError("dropout is not supported "
                                  f"(dropout_p={dropout_p!r}); "
                                  "the book's kernels compute attention without it")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {is_causal!r}")
    if scale is not None and (isinstance(scale, bool)
                              or not isinstance(scale, numbers.Real)):
        raise TypeError(f"scale must be a number or None, got {scale!r}")
    mask = check_mask_keywords(mask)
    if key_lengths is not None and not (
            isinstance(key_lengths, torch.Tensor)
            and key_lengths.dtype in INTEGER_DTYPES):
        what = getattr(key_lengths, "dtype", type(key_lengths).__name__)
        raise ValueError("key_lengths must be an integer tensor of shape [B], "
                         f"got {what}")
    if attn_mask is not None and not isinstance(attn_mask, torch.Tensor):
        raise TypeError("attn_mask must be a tensor or None, "
                        f"got {type(attn_mask).__name__}")
    check_same_device(dict(q=q, k=k, v=v, attn_mask=attn_mask, key_lengths=key_lengths))

    out_shape = tuple(q.shape)
    q4, k4, v4 = _as_bhsd(q), _as_bhsd(k), _as_bhsd(v)
    b, h, sq, d = q4.shape
    sk = k4.shape[2]
    bias = None
    if attn_mask is not None:
        check_attn_mask(attn_mask, *q.shape[:-1], sk)
        m = attn_mask
        if m.dtype == torch.bool:
            m = torch.zeros(m.shape, device=m.device).masked_fill(~m, float("-inf"))
        m = m.float().expand(*q.shape[:-1], sk)
        bias = m.reshape(b, h, sq, sk)   # a view when the batch dims broadcast alike
    lengths = None
    if key_lengths is not None:
        if tuple(key_lengths.shape) not in ((b,), tuple(q.shape[:-3])):
            raise ValueError(f"key_lengths must have shape [B] = [{b}] (q's batch), "
                             f"got {tuple(key_lengths.shape)}")
        # Lengths past Sk mean no padding and negative ones mean no key: clamping to
        # [0, Sk] keeps every value's meaning and makes it fit in 32 bits.
        lengths = key_lengths.reshape(b).clamp(0, sk).to(torch.int32).contiguous()
    # larger values than fit in 32 bits mean the same as the one each is reduced to
    mask = {name: reduce(mask[name], sq, sk) if name in mask else 0
            for name, reduce in MASK_KEYWORDS.items()}
    scale = softmax_scale(scale, d, float32=torch.float64 not in dtypes)
    return AttentionArgs(q4, k4, v4, bias, lengths, is_causal, mask, scale, out_shape)


def check_reference_args(q, k, v, *, scale=None, is_causal=False, attn_mask=None,
                         key_lengths=None, **mask) -> None:
    """The rules of :func:`attention_args` for the references, which take any floating
    dtype (float64 to check the kernels) and compute on [B, H, S, D] tensors as
    given."""
    attention_args(q, k, v, attn_mask, 0.0, is_causal, scale, key_lengths=key_lengths,
                   dtypes=FLOATS, **mask)
    if q.dim() != 4:
        raise ValueError("the references take 4-D [B, H, S, D] tensors, got q of "
                         f"shape {tuple(q.shape)}")
