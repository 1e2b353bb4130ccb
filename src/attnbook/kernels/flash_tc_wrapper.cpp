// torch.ops.attnbook.flash_tc_forward's C++ side (ops/flash_tc.py): checks the tensors
// and launches a step of chapter 8's tensor-core forward (flash_tc.cu).
#include "attnbook_torch.h"   // first: torch's names before the kernels' structs
#include "flash_tc.h"
#include "wrapper_args.h"

// o: a new contiguous [B, H, Sq, D] of q's dtype; lse: a new float [B, H, Sq].
std::vector<at::Tensor> forward(at::Tensor q, at::Tensor k, at::Tensor v,
                                at::Tensor bias, at::Tensor lengths,
                                const std::vector<int64_t>& mask_options, double scale,
                                int64_t step, int64_t block_q, int64_t block_k) {
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  const auto dtype = bf16 ? at::kBFloat16 : at::kHalf;
  const Layout lq = layout_of(q, "q", dtype), lk = layout_of(k, "k", dtype),
               lv = layout_of(v, "v", dtype);
  const auto [B, H, Hkv, Sq, Sk, D] = attention_shape(q, k, v);
  TORCH_CHECK(B * H <= INT32_MAX && Sq <= INT32_MAX - 256 && Sk <= INT32_MAX - 256,
              "B·H, Sq and Sk must be below 2^31 - 256");
  TORCH_CHECK(block_q % 16 == 0 && block_q > 0, "block_q must be a multiple of 16");
  const MaskParams mask = mask_params(bias, lengths, mask_options);
  attnbook::DeviceGuard guard(q);
  at::Tensor o = q.new_empty({B, H, Sq, D});
  at::Tensor lse = q.new_empty({B, H, Sq}, q.options().dtype(at::kFloat));
  if (o.numel() == 0) return {o, lse.fill_(-INFINITY)};
  check_aligned(q, "q");
  check_aligned(k, "k");
  check_aligned(v, "v");
  const TcStatus status = flash_tc_forward(
      bf16, int(step), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
      lse.data_ptr<float>(), lq, lk, lv, int(B), int(H), int(Hkv), int(Sq), int(Sk),
      int(D), int(block_q), int(block_k), float(scale), mask, attnbook::stream());
  TORCH_CHECK(status != kTcNotCompiled, "step ", step, " with head_dim ", D,
              " and tiles ", block_q, "x", block_k, " is not compiled");
  TORCH_CHECK(status != kTcArch, "this GPU lacks the tensor cores for ",
              q.scalar_type(), " (fp16 needs sm_75, bf16 sm_80)");
  TORCH_CHECK(status != kTcSharedMemory, "tiles ", block_q, "x", block_k,
              " at head_dim ", D,
              " need more shared memory than this GPU gives a block");
  attnbook::check_launch();
  return {o, lse};
}
