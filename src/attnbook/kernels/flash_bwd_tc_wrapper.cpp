// torch.ops.attnbook.flash_tc_backward's C++ side (ops/backward_tc.py): checks the
// tensors and launches the tensor-core backward pass (flash_bwd_tc.cu).
#include "attnbook_torch.h"   // first: torch's names before the kernels' structs
#include "flash_bwd_tc.h"
#include "wrapper_args.h"

// dq [B, H, Sq, D], dk and dv [B, Hkv, Sk, D], new and contiguous, of q's dtype; every
// input contiguous, rows on 16 bytes; dlse: float [B, H, Sq] or empty. Step 1 or 2 of
// the kernels; slots: step 2's dQ slots (0: as many as fill the GPU).
std::vector<at::Tensor> backward(at::Tensor dout, at::Tensor q, at::Tensor k,
                                 at::Tensor v, at::Tensor o, at::Tensor lse,
                                 at::Tensor dlse, at::Tensor bias, at::Tensor lengths,
                                 const std::vector<int64_t>& mask_options,
                                 double scale, int64_t step, int64_t slots) {
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  const auto dtype = bf16 ? at::kBFloat16 : at::kHalf;
  const char* names[] = {"dout", "q", "k", "v", "o"};
  const at::Tensor* tensors[] = {&dout, &q, &k, &v, &o};
  for (int i = 0; i < 5; ++i) attnbook::check_tensor(*tensors[i], names[i], dtype);
  const auto [B, H, Hkv, Sq, Sk, D] = attention_shape(q, k, v);
  const bool has_dlse = check_backward_args(q, o, dout, lse, dlse);
  TORCH_CHECK(B * H <= INT32_MAX && Sq <= INT32_MAX - 256 && Sk <= INT32_MAX - 256,
              "B·H, Sq and Sk must be below 2^31 - 256");
  const MaskParams mask = mask_params(bias, lengths, mask_options);
  TORCH_CHECK(step == 1 || step == 2,
              "the tensor-core backward has steps 1 and 2, not ", step);
  TORCH_CHECK(slots >= 0 && slots <= INT32_MAX, "slots must be >= 0, not ", slots);
  attnbook::DeviceGuard guard(q);
  at::Tensor dq = q.new_zeros(q.sizes()), dk = k.new_zeros(k.sizes()),
             dv = v.new_zeros(v.sizes());
  if (q.numel() == 0 || k.numel() == 0) return {dq, dk, dv};
  for (int i = 0; i < 5; ++i) check_aligned(*tensors[i], names[i]);
  at::Tensor delta = lse.new_empty({B, H, Sq});
  int n_slots = int(slots);
  const size_t floats = flash_bwd_tc_workspace(int(step), &n_slots, int(B), int(H),
                                               int(Hkv), int(Sq), int(Sk), int(D));
  at::Tensor dq_slots = lse.new_zeros({int64_t(floats)});
  const TcStatus status = flash_bwd_tc(
      bf16, int(step), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
      dout.data_ptr(), lse.data_ptr<float>(),
      has_dlse ? dlse.data_ptr<float>() : nullptr, delta.data_ptr<float>(),
      dq_slots.data_ptr<float>(), n_slots, dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
      int(B), int(H), int(Hkv), int(Sq), int(Sk), int(D), float(scale), mask,
      attnbook::stream());
  TORCH_CHECK(status != kTcNotCompiled, "head_dim ", D,
              " is not compiled for the tensor-core backward pass (64 and 128 are)");
  TORCH_CHECK(status != kTcSharedMemory, "step 2 of the tensor-core backward needs ",
              "more shared memory a block than this GPU gives (sm_80 or later): use "
              "step 1");
  TORCH_CHECK(status != kTcArch, "this GPU lacks the tensor cores for ",
              q.scalar_type(), " (fp16 needs sm_75, bf16 sm_80)");
  attnbook::check_launch();
  return {dq, dk, dv};
}
