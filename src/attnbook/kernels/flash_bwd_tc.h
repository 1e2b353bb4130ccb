// The host launcher of the tensor-core backward pass (flash_bwd_tc.cu). Host code
// only: the wrapper, compiled without CUDA, includes it too.
#pragma once
#include <cuda_runtime.h>

#include "flash_tc.h"   // TcStatus
#include "mask_params.h"

// fp16 (bf16 = false) or bf16, every tensor contiguous and starting on 16 bytes:
// q, o, dout, dq [B, H, Sq, D]; k, v, dk, dv [B, Hkv, Sk, D]; lse, and dlse (its
// gradient, or nullptr), float [B, H, Sq]; delta: a float [B, H, Sq] workspace. Step 1
// (two passes) or 2 (one fused pass, FlashAttention-2's shape); step 2 adds dQ into
// `slots` fp32 slots, dq_slots: flash_bwd_tc_workspace's floats, zero on entry.
// dq, dk and dv are written whole. Returns kTcLaunched, or why nothing was launched
// (kTcNotCompiled: head_dim D or the step; kTcArch: the GPU lacks the tensor cores for
// the dtype; kTcSharedMemory: step 2's tiles do not fit, as on sm_75).
TcStatus flash_bwd_tc(bool bf16, int step, const void* q, const void* k, const void* v,
                      const void* o, const void* dout, const float* lse,
                      const float* dlse, float* delta, float* dq_slots, int slots,
                      void* dq, void* dk, void* dv, int B, int H, int Hkv, int Sq,
                      int Sk, int D, float scale, const MaskParams& mask,
                      cudaStream_t stream);

// The floats of step 2's dQ slots (0 for step 1), and in *slots their number: the
// request if positive (at most one per key block), else enough to fill the GPU.
size_t flash_bwd_tc_workspace(int step, int* slots, int B, int H, int Hkv, int Sq,
                              int Sk, int D);
