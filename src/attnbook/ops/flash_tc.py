"""Chapter 8's tensor-core kernels (``kernels/flash_tc.cu`` and its ``flash_tc_*.cuh``
steps) as the registered op ``torch.ops.attnbook.flash_tc_forward``, and their Python
entry point for float16 and bfloat16 inputs."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ..args.attention import HALF_PRECISION, attention_args
from .flash import aligned_rows, check_no_mask_grad
from .registry import extension

__all__ = ["flash_attention_tc", "flash_tc_forward", "tc_forward", "TC_STEPS",
           "TC_FASTEST", "TC_HEAD_DIMS", "TC_TILES", "FA2_TILES", "TC_SWEEP",
           "tc_tiles"]

# The chapter's steps, each a kernel of kernels/flash_tc*.
TC_STEPS = {1: "mma.sync", 2: "ldmatrix", 3: "swizzled shared memory",
            4: "cp.async pipeline", 5: "P in registers",
            6: "FlashAttention-2's shape"}
# The step flash_attention_tc and ab.attention run in float16 and bfloat16. On the H200
# (B·S = 32768, H = 16, D = 64 and 128, fp16 and bf16): of steps 1-5, step 3 took the
# least time at every shape, S = 512 ... 16384, causal and not (bench/results/08); step
# 6 took less than step 3 at 22 of the 24 cases of bench/results/08fa2 (S = 1024, 4096
# and 16384), 1.3-2.3 times less; the other two (causal, D = 64, S = 1024: 1.2-1.3
# times more) were its first version's diagonal tiles, which have had a path of their
# own since.
TC_FASTEST = 6
TC_HEAD_DIMS = (64, 128)   # other head dims up to 128 are zero-padded to one of these
TC_TILES = {64: (64, 64), 128: (64, 32)}   # (Br, Bc) of steps 1-5
FA2_TILES = {64: (128, 128), 128: (128, 64)}   # step 6: 32 rows per warp
# (Br, Bc) compiled for step 5 besides TC_TILES, for the tile sweep.
TC_SWEEP = {64: ((128, 64),), 128: ((64, 64), (128, 32))}


@torch.library.custom_op("attnbook::flash_tc_forward", mutates_args=())
def flash_tc_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     bias: Optional[torch.Tensor], key_lengths: Optional[torch.Tensor],
                     mask_options: list[int], scale: float, step: int, block_q: int,
                     block_k: int, backward_step: int = 0
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step`` of chapter 8 on checked fp16/bf16 inputs (head_dim 64 or 128): o
    [B, H, Sq, D] in q's dtype and the float32 log-sum-exp [B, H, Sq]. Inputs whose rows
    do not start on 16 bytes are copied first; on a GPU, first the device's checks
    (inside the op, which ``torch.compile`` does not trace). ``backward_step``: the step
    of chapter 11's tensor-core backward autograd runs (0: the device's default)."""
    _check_device(q.dtype, q.device, step, q.shape[-1], (block_q, block_k))
    module = extension("flash_tc").module(q.device)
    none = q.new_empty(0, dtype=torch.float32)
    return tuple(module.forward(
        aligned_rows(q), aligned_rows(k), aligned_rows(v),
        none if bias is None else bias,
        none if key_lengths is None else key_lengths, mask_options, scale, step,
        block_q, block_k))


@flash_tc_forward.register_fake
def _(q, k, v, bias, key_lengths, mask_options, scale, step, block_q, block_k,
      backward_step=0):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)


def _smem_bytes(step: int, d: int, br: int, bc: int) -> int:
    """Shared memory of a launch, as the kernels lay it out (flash_tc*.cuh)."""
    p = 0 if step >= 5 else br * bc
    kv = 2 if step <= 3 or step == 6 else 4   # K and V tiles, double-buffered or not
    return 2 * (br * d + kv * bc * d + p)


def tc_tiles(step: int, d: int) -> tuple:
    """The (Br, Bc) step ``step`` runs at head_dim ``d`` by default."""
    return (FA2_TILES if step == 6 else TC_TILES)[d]


def _check_device(dtype, device: torch.device, step: int, d: int, tiles) -> None:
    """On a GPU: the instruction, the dtype and the shared memory the launch needs."""
    if device.type != "cuda":
        return
    cap = torch.cuda.get_device_capability(device)
    name = torch.cuda.get_device_name(device)
    if cap < (7, 5):
        raise RuntimeError(f"tensor-core attention needs sm_75 or newer; {name} is "
                           f"sm_{cap[0]}{cap[1]}: use float32")
    if dtype == torch.bfloat16 and cap < (8, 0):
        raise TypeError(f"bfloat16 tensor cores need sm_80 or newer; {name} is "
                        f"sm_{cap[0]}{cap[1]}: use float16")
    need = _smem_bytes(step, d, *tiles)
    have = torch.cuda.get_device_properties(device).shared_memory_per_block_optin
    if need > have:
        raise ValueError(f"tiles {tiles} at head_dim {d} need {need} bytes of shared "
                         f"memory; {name} allows {have} per block")


def _tiles(step: int, d: int, tiles) -> tuple:
    if step not in TC_STEPS:
        raise ValueError(f"step must be one of {tuple(TC_STEPS)}, got {step!r}")
    if tiles is None:
        return tc_tiles(step, d)
    tiles = tuple(tiles)
    allowed = (tc_tiles(step, d),) + (TC_SWEEP[d] if step == 5 else ())
    if tiles not in allowed:
        raise ValueError(f"tiles {tiles} are not compiled for step {step} at head_dim "
                         f"{d}: use one of {allowed}")
    return tiles


def tc_forward(a, step: int = TC_FASTEST, tiles=None, backward_step: int = 0):
    """o [B, H, Sq, D] and lse [B, H, Sq] of step ``step`` on checked half-precision
    arguments (:class:`~attnbook.args.attention.AttentionArgs`), differentiable through
    step ``backward_step`` of the backward (0: the device's default)."""
    d = a.q.shape[-1]
    if d > max(TC_HEAD_DIMS):
        raise ValueError(f"head_dim {d} is not supported by the tensor-core kernels: "
                         f"at most {max(TC_HEAD_DIMS)}")
    dp = min(x for x in TC_HEAD_DIMS if x >= d)
    tiles = _tiles(step, dp, tiles)
    check_no_mask_grad(a)
    qkv = ((a.q, a.k, a.v) if dp == d
           else (F.pad(t, (0, dp - d)) for t in (a.q, a.k, a.v)))
    o, lse = flash_tc_forward(*qkv, a.bias, a.key_lengths, a.mask_options, a.scale,
                              step, *tiles, backward_step)
    return (o, lse) if dp == d else (o[..., :d], lse)


def flash_attention_tc(q, k, v, attn_mask=None, is_causal=False, scale=None, *,
                       key_lengths=None, step=TC_FASTEST, tiles=None,
                       backward_step=0, return_lse=False, **mask):
    """softmax(q kᵀ · scale + mask) v on tensor cores, for float16 and bfloat16 inputs
    (bfloat16 needs sm_80 on a GPU; the emulator runs both). Arguments as for
    :func:`attnbook.attention`; head_dim up to 128 (64 and 128 run as they are, others
    are zero-padded to the next of them). ``step``: the chapter's kernel, 1–6
    (:data:`TC_STEPS`), by default the fastest measured (:data:`TC_FASTEST`); ``tiles``
    = (Br, Bc): :func:`tc_tiles` by default, or for step 5 one of :data:`TC_SWEEP`.
    Returns o in q's dtype (and the float32 log-sum-exp if ``return_lse``),
    differentiable in q, k and v through the tensor-core backward
    (:mod:`attnbook.ops.backward_tc`), whichever step ran: its step
    ``backward_step`` (:data:`~attnbook.ops.backward_tc.FLASH_BWD_TC_STEPS`; 0, the
    default: :func:`~attnbook.ops.backward_tc.tc_backward_step`'s)."""
    a = attention_args(q, k, v, attn_mask, 0.0, is_causal, scale,
                       key_lengths=key_lengths, dtypes=HALF_PRECISION, **mask)
    o, lse = tc_forward(a, step, tiles, backward_step)
    o = a.output(o)
    return (o, lse.reshape(a.out_shape[:-1])) if return_lse else o
