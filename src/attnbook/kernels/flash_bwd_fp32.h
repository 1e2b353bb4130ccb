// The host launcher of chapter 11's fp32 backward pass (flash_bwd_fp32.cu). Host code
// only: the wrapper, compiled without CUDA, includes it too.
#pragma once
#include <cuda_runtime.h>

#include "mask_params.h"

// Every tensor contiguous: q, o, dout, dq [B, H, Sq, D]; k, v, dk, dv [B, Hkv, Sk, D];
// lse, and dlse (its gradient, or nullptr), [B, H, Sq]; delta: a [B, H, Sq] workspace.
// dq, dk, dv are written whole. step: 1 (a thread per row or key) or 2 (eight lanes
// each). Returns false if head_dim D or the step is not compiled.
bool flash_bwd_fp32(const float* q, const float* k, const float* v, const float* o,
                    const float* dout, const float* lse, const float* dlse,
                    float* delta, float* dq, float* dk, float* dv, int B, int H,
                    int Hkv, int Sq, int Sk, int D, int step, float scale,
                    const MaskParams& mask, cudaStream_t stream);
