"""The backward pass of the fused fp32 kernel (``kernels/flash_bwd_fp32.cu``) as the
registered op ``torch.ops.attnbook.flash_backward``, and the autograd formula that makes
``torch.ops.attnbook.flash_forward`` (and so ``ab.attention`` in float32) differentiable
in q, k and v."""
from __future__ import annotations

from typing import Optional

import torch

from ..toolchain.compile import package_module
from .flash import flash_forward
from .wrappers import ATTENTION_CPP

__all__ = ["flash_backward", "EXTENSIONS"]

WRAPPER = ATTENTION_CPP + r"""
bool flash_bwd_fp32(const float*, const float*, const float*, const float*,
                    const float*, const float*, const float*, float*, float*, float*,
                    float*, int, int, int, int, int, int, float, const MaskParams&,
                    cudaStream_t);

// dq [B, H, Sq, D], dk and dv [B, Hkv, Sk, D], new and contiguous; every input
// contiguous; dlse: [B, H, Sq] or empty.
std::vector<at::Tensor> backward(at::Tensor dout, at::Tensor q, at::Tensor k,
                                 at::Tensor v, at::Tensor o, at::Tensor lse,
                                 at::Tensor dlse, at::Tensor bias, at::Tensor lengths,
                                 bool causal, int64_t stride, int64_t window,
                                 double scale) {
  const char* names[] = {"dout", "q", "k", "v", "o", "lse"};
  const at::Tensor* tensors[] = {&dout, &q, &k, &v, &o, &lse};
  for (int i = 0; i < 6; ++i) attnbook::check_tensor(*tensors[i], names[i], at::kFloat);
  const auto [B, H, Hkv, Sq, Sk, D] = attention_shape(q, k, v);
  TORCH_CHECK(o.sizes() == q.sizes() && dout.sizes() == q.sizes(),
              "o and dout must have q's shape");
  TORCH_CHECK(lse.dim() == 3 && lse.size(0) == B && lse.size(1) == H
                  && lse.size(2) == Sq,
              "lse must be [B, H, Sq]");
  const bool has_dlse = dlse.numel() > 0;
  if (has_dlse) {
    attnbook::check_tensor(dlse, "dlse", at::kFloat);
    TORCH_CHECK(dlse.sizes() == lse.sizes(), "dlse must have lse's shape");
  }
  TORCH_CHECK(B * H <= INT32_MAX && Sq <= INT32_MAX && Sk <= INT32_MAX,
              "B·H, Sq and Sk must be below 2^31");
  const MaskParams mask = mask_params(bias, lengths, causal, stride, window);
  attnbook::DeviceGuard guard(q);
  at::Tensor dq = q.new_zeros(q.sizes()), dk = k.new_zeros(k.sizes()),
             dv = v.new_zeros(v.sizes());
  if (q.numel() == 0 || k.numel() == 0) return {dq, dk, dv};
  at::Tensor delta = q.new_empty({B, H, Sq});
  TORCH_CHECK(flash_bwd_fp32(q.data_ptr<float>(), k.data_ptr<float>(),
                             v.data_ptr<float>(), o.data_ptr<float>(),
                             dout.data_ptr<float>(),
                             lse.data_ptr<float>(),
                             has_dlse ? dlse.data_ptr<float>() : nullptr,
                             delta.data_ptr<float>(), dq.data_ptr<float>(),
                             dk.data_ptr<float>(), dv.data_ptr<float>(), int(B), int(H),
                             int(Hkv), int(Sq), int(Sk), int(D), float(scale), mask,
                             attnbook::stream()),
              "head_dim ", D, " is not compiled for the backward pass");
  attnbook::check_launch();
  return {dq, dk, dv};
}
"""

EXTENSIONS = [("flash_bwd_fp32", "flash_bwd_fp32.cu", WRAPPER, ["backward"])]


@torch.library.custom_op("attnbook::flash_backward", mutates_args=())
def flash_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                   v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                   dlse: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                   key_lengths: Optional[torch.Tensor],
                   causal: bool, stride: int, window: int,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of the fused forward for the upstream gradients ``dout`` (and ``dlse``
    of the log-sum-exp, or None), on contiguous checked inputs."""
    backend = "cuda" if q.device.type == "cuda" else "emulator"
    module = package_module(*EXTENSIONS[0], backend)
    none = q.new_empty(0)
    return tuple(module.backward(
        dout, q, k, v, o, lse, none if dlse is None else dlse,
        none if bias is None else bias, none if key_lengths is None else key_lengths,
        causal, stride, window, scale))


@flash_backward.register_fake
def _(dout, q, k, v, o, lse, dlse, bias, key_lengths, causal, stride, window, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, bias, key_lengths, causal, stride, window, scale, _, _ = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, bias, key_lengths)
    ctx.options = (causal, stride, window, scale)


def _backward(ctx, do, dlse):
    q, k, v, o, lse, bias, key_lengths = ctx.saved_tensors
    dq, dk, dv = flash_backward(do.contiguous(), q.contiguous(), k.contiguous(),
                                v.contiguous(), o, lse,
                                None if dlse is None else dlse.contiguous(), bias,
                                key_lengths, *ctx.options)
    return dq, dk, dv, None, None, None, None, None, None, None, None


flash_forward.register_autograd(_backward, setup_context=_setup_context)
