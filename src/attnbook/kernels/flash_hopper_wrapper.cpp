// torch.ops.attnbook.flash_hopper_forward's C++ side (ops/flash_hopper.py): checks the
// tensors and launches a step of chapter 12's Hopper forward (flash_hopper.cu).
#include "attnbook_torch.h"   // first: torch's names before the kernels' structs
#include "flash_hopper.h"
#include "wrapper_args.h"

// o: a new contiguous [B, H, Sq, D] of q's dtype; lse: a new float [B, H, Sq].
std::vector<at::Tensor> forward(at::Tensor q, at::Tensor k, at::Tensor v,
                                at::Tensor bias, at::Tensor lengths,
                                const std::vector<int64_t>& mask_options, double scale,
                                int64_t step) {
  const HalfForward f = half_forward(q, k, v, bias, lengths, mask_options);
  attnbook::DeviceGuard guard(q);
  if (f.o.numel() == 0) return {f.o, f.lse.fill_(-INFINITY)};
  // no key: every row is zeros (and TMA cannot map a tensor with an empty extent)
  if (f.n.Sk == 0) return {f.o.zero_(), f.lse.fill_(-INFINITY)};
  const TcStatus status = flash_hopper_forward(
      f.bf16, int(step), q.data_ptr(), k.data_ptr(), v.data_ptr(), f.o.data_ptr(),
      f.lse.data_ptr<float>(), f.lq, f.lk, f.lv, int(f.n.B), int(f.n.H), int(f.n.Hkv),
      int(f.n.Sq), int(f.n.Sk), int(f.n.D), float(scale), f.mask, attnbook::stream());
  TORCH_CHECK(status != kTcNotCompiled, "step ", step, " with head_dim ", f.n.D,
              " is not compiled");
  TORCH_CHECK(status != kTcSharedMemory,
              "this GPU gives a block less shared memory than the kernel needs");
  TORCH_CHECK(status != kTcTensorMap, "the driver refused a TMA tensor map of q, k or "
              "v (step ", step, " needs 16-byte-aligned rows and strides)");
  attnbook::check_launch();
  return {f.o, f.lse};
}
