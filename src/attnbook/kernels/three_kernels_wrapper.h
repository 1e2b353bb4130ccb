// The C++ side of torch.ops.attnbook.three_kernel_forward (ops/attention.py), shared by
// the naive and the tiled path: naive_attention_wrapper.cpp and
// tiled_attention_wrapper.cpp each bind it to their launcher as the function forward.
#pragma once
#include "attnbook_torch.h"   // first: torch's names before the kernels' structs
#include "three_kernels.h"
#include "wrapper_args.h"

// o: a new contiguous [B, H, Sq, D]; the scores go through a workspace of
// B·H·Sq·ceil(Sk / key_step) floats.
template <decltype(&attention_naive) Launch>
at::Tensor three_kernel_forward(at::Tensor q, at::Tensor k, at::Tensor v,
                                at::Tensor bias, at::Tensor lengths,
                                const std::vector<int64_t>& mask_options, double scale,
                                int64_t key_step) {
  const Layout lq = layout_of(q, "q"), lk = layout_of(k, "k"), lv = layout_of(v, "v");
  const auto [B, H, Hkv, Sq, Sk, D] = attention_shape(q, k, v);
  TORCH_CHECK(key_step >= 1 && key_step <= INT32_MAX, "key_step must be positive");
  const int64_t Sc = (Sk + key_step - 1) / key_step;
  TORCH_CHECK(B * H * Sq <= INT32_MAX && Sc * D * key_step <= INT32_MAX,
              "B·H·Sq and Sk·D must be below 2^31 for the three-kernel paths");
  const MaskParams mask = mask_params(bias, lengths, mask_options);
  attnbook::DeviceGuard guard(q);
  at::Tensor o = q.new_empty({B, H, Sq, D});
  if (o.numel() == 0) return o;
  if (Sk == 0) return o.zero_();   // every row is empty
  at::Tensor s = q.new_empty({B, H, Sq, Sc});
  Launch(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
         s.data_ptr<float>(), o.data_ptr<float>(), lq, lk, lv, int(B), int(H), int(Hkv),
         int(Sq), int(Sk), int(D), float(scale), mask, int(key_step),
         attnbook::stream());
  attnbook::check_launch();
  return o;
}
