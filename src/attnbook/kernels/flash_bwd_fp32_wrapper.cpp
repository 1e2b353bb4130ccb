// torch.ops.attnbook.flash_backward's C++ side (ops/backward.py): checks the tensors
// and launches chapter 11's fp32 backward pass (flash_bwd_fp32.cu).
#include "attnbook_torch.h"   // first: torch's names before the kernels' structs
#include "flash_bwd_fp32.h"
#include "wrapper_args.h"

// dq [B, H, Sq, D], dk and dv [B, Hkv, Sk, D], new and contiguous; every input
// contiguous; dlse: [B, H, Sq] or empty.
std::vector<at::Tensor> backward(at::Tensor dout, at::Tensor q, at::Tensor k,
                                 at::Tensor v, at::Tensor o, at::Tensor lse,
                                 at::Tensor dlse, at::Tensor bias, at::Tensor lengths,
                                 const std::vector<int64_t>& mask_options,
                                 double scale, int64_t step) {
  const char* names[] = {"dout", "q", "k", "v", "o"};
  const at::Tensor* tensors[] = {&dout, &q, &k, &v, &o};
  for (int i = 0; i < 5; ++i) attnbook::check_tensor(*tensors[i], names[i], at::kFloat);
  const auto [B, H, Hkv, Sq, Sk, D] = attention_shape(q, k, v);
  const bool has_dlse = check_backward_args(q, o, dout, lse, dlse);
  TORCH_CHECK(B * H <= INT32_MAX && Sq <= INT32_MAX && Sk <= INT32_MAX,
              "B·H, Sq and Sk must be below 2^31");
  if (step == 2)   // 16-byte loads and stores
    for (int i = 0; i < 4; ++i) check_aligned(*tensors[i], names[i]);
  const MaskParams mask = mask_params(bias, lengths, mask_options);
  attnbook::DeviceGuard guard(q);
  at::Tensor dq = q.new_zeros(q.sizes()), dk = k.new_zeros(k.sizes()),
             dv = v.new_zeros(v.sizes());
  if (q.numel() == 0 || k.numel() == 0) return {dq, dk, dv};
  at::Tensor delta = q.new_empty({B, H, Sq});
  TORCH_CHECK(flash_bwd_fp32(q.data_ptr<float>(), k.data_ptr<float>(),
                             v.data_ptr<float>(), o.data_ptr<float>(),
                             dout.data_ptr<float>(), lse.data_ptr<float>(),
                             has_dlse ? dlse.data_ptr<float>() : nullptr,
                             delta.data_ptr<float>(), dq.data_ptr<float>(),
                             dk.data_ptr<float>(), dv.data_ptr<float>(), int(B), int(H),
                             int(Hkv), int(Sq), int(Sk), int(D), int(step),
                             float(scale), mask, attnbook::stream()),
              "head_dim ", D, " or step ", step, " is not compiled for the backward ",
              "pass");
  attnbook::check_launch();
  return {dq, dk, dv};
}
