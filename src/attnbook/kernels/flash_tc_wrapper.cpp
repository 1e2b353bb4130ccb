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
  TORCH_CHECK(block_q % 16 == 0 && block_q > 0, "block_q must be a multiple of 16");
  const HalfForward f = half_forward(q, k, v, bias, lengths, mask_options);
  attnbook::DeviceGuard guard(q);
  if (f.o.numel() == 0) return {f.o, f.lse.fill_(-INFINITY)};
  const TcStatus status = flash_tc_forward(
      f.bf16, int(step), q.data_ptr(), k.data_ptr(), v.data_ptr(), f.o.data_ptr(),
      f.lse.data_ptr<float>(), f.lq, f.lk, f.lv, int(f.n.B), int(f.n.H), int(f.n.Hkv),
      int(f.n.Sq), int(f.n.Sk), int(f.n.D), int(block_q), int(block_k), float(scale),
      f.mask, attnbook::stream());
  TORCH_CHECK(status != kTcNotCompiled, "step ", step, " with head_dim ", f.n.D,
              " and tiles ", block_q, "x", block_k, " is not compiled");
  TORCH_CHECK(status != kTcArch, "this GPU lacks the tensor cores for ",
              q.scalar_type(), " (fp16 needs sm_75, bf16 sm_80)");
  TORCH_CHECK(status != kTcSharedMemory, "tiles ", block_q, "x", block_k,
              " at head_dim ", f.n.D,
              " need more shared memory than this GPU gives a block");
  attnbook::check_launch();
  return {f.o, f.lse};
}
