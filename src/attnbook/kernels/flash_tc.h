// The host launcher of chapter 8's tensor-core forward (flash_tc.cu), every step of
// the chapter behind it. Host code only: the wrapper, compiled without CUDA, includes
// it too.
#pragma once
#include <cuda_runtime.h>

#include "layout.h"
#include "mask_params.h"

// What flash_tc_forward (and chapter 12's flash_hopper_forward) report: launched, or
// why not (kTcTensorMap: the driver refused a TMA tensor map of q, k or v).
enum TcStatus {
  kTcLaunched = 0, kTcNotCompiled, kTcArch, kTcSharedMemory, kTcTensorMap
};

// fp16 (bf16 = false) or bf16 q [B, H, Sq, D], k and v [B, Hkv, Sk, D] with strides
// lq, lk, lv whose rows start on 16 bytes; o: contiguous [B, H, Sq, D] of their dtype;
// lse: float [B, H, Sq]. step: 1–6, the chapter's steps; a block owns Br query rows
// (16 per warp up to step 5, 32 in step 6) and streams key tiles of Bc.
TcStatus flash_tc_forward(bool bf16, int step, const void* q, const void* k,
                          const void* v, void* o, float* lse, const Layout& lq,
                          const Layout& lk, const Layout& lv, int B, int H, int Hkv,
                          int Sq, int Sk, int D, int Br, int Bc, float scale,
                          const MaskParams& mask, cudaStream_t stream);
