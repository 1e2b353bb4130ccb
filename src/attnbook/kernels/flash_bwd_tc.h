// The host launcher of the tensor-core backward pass (flash_bwd_tc.cu). Host code
// only: the wrapper, compiled without CUDA, includes it too.
#pragma once
#include <cuda_runtime.h>

#include "flash_tc.h"   // TcStatus
#include "mask_params.h"

// fp16 (bf16 = false) or bf16, every tensor contiguous and starting on 16 bytes:
// q, o, dout, dq [B, H, Sq, D]; k, v, dk, dv [B, Hkv, Sk, D]; lse, and dlse (its
// gradient, or nullptr), float [B, H, Sq]; delta: a float [B, H, Sq] workspace.
// dq, dk and dv are written whole. Returns kTcLaunched, or why nothing was launched
// (kTcNotCompiled: head_dim D; kTcArch: the GPU lacks the tensor cores for the dtype).
TcStatus flash_bwd_tc(bool bf16, const void* q, const void* k, const void* v,
                      const void* o, const void* dout, const float* lse,
                      const float* dlse, float* delta, void* dq, void* dk, void* dv,
                      int B, int H, int Hkv, int Sq, int Sk, int D, float scale,
                      const MaskParams& mask, cudaStream_t stream);
