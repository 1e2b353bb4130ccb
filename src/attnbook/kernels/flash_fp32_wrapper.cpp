// torch.ops.attnbook.flash_forward's C++ side (ops/flash.py): checks the tensors and
// launches chapter 7's fused fp32 forward (flash_fp32.cu).
#include "attnbook_torch.h"   // first: torch's names before the kernels' structs
#include "flash_fp32.h"
#include "wrapper_args.h"

// o: a new contiguous [B, H, Sq, D]; lse: a new [B, H, Sq] (-inf where no key is
// admitted).
std::vector<at::Tensor> flash_forward(at::Tensor q, at::Tensor k, at::Tensor v,
                                      at::Tensor bias, at::Tensor lengths,
                                      const std::vector<int64_t>& mask_options,
                                      double scale, int64_t step, int64_t block_q,
                                      int64_t block_k) {
  const Layout lq = layout_of(q, "q"), lk = layout_of(k, "k"), lv = layout_of(v, "v");
  const auto [B, H, Hkv, Sq, Sk, D] = attention_shape(q, k, v);
  TORCH_CHECK(B * H <= INT32_MAX && Sq <= INT32_MAX && Sk <= INT32_MAX,
              "B·H, Sq and Sk must be below 2^31");
  const MaskParams mask = mask_params(bias, lengths, mask_options);
  if (step >= 2)
    for (const auto& [t, name] : {std::pair{q, "q"}, {k, "k"}, {v, "v"}})
      check_aligned(t, name);
  attnbook::DeviceGuard guard(q);
  at::Tensor o = q.new_empty({B, H, Sq, D}), lse = q.new_empty({B, H, Sq});
  if (o.numel() == 0) return {o, lse.fill_(-INFINITY)};
  TORCH_CHECK(flash_fwd_fp32(q.data_ptr<float>(), k.data_ptr<float>(),
                             v.data_ptr<float>(), o.data_ptr<float>(),
                             lse.data_ptr<float>(), lq, lk, lv, int(B), int(H),
                             int(Hkv), int(Sq), int(Sk), int(D), int(step),
                             int(block_q), int(block_k), float(scale), mask,
                             attnbook::stream()),
              "step ", step, " at head_dim ", D, " with tiles ", block_q, "x", block_k,
              " is not compiled");
  attnbook::check_launch();
  return {o, lse};
}
