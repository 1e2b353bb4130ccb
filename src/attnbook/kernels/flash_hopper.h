// The host launcher of chapter 12's Hopper forward (flash_hopper.cu), every step of
// the chapter behind it. Host code only.
#pragma once
#include <cuda_runtime.h>

#include "flash_tc.h"   // TcStatus, and the same arguments as chapter 8's forward

// fp16 (bf16 = false) or bf16 q [B, H, Sq, D], k and v [B, Hkv, Sk, D] with strides
// lq, lk, lv whose rows start on 16 bytes; o: contiguous [B, H, Sq, D] of their dtype;
// lse: float [B, H, Sq]. step: the chapter's steps (1: wgmma from shared memory, 2:
// TMA loads, which also need every stride of q, k and v with more than one index a
// non-zero multiple of 16 bytes, 3: a TMA producer warpgroup and two consumers, 4:
// the consumers in ping-pong, 5: and each consumer's tiles pipelined, all with step
// 2's needs); a block of steps 1-2 is one warpgroup of Br = 64 query rows, of steps
// 3-5 three warpgroups for 128 rows; key tiles of Bc = 64; D 64 or 128. Needs an
// sm_90 GPU and a build for sm_90a (the kernels trap otherwise).
TcStatus flash_hopper_forward(bool bf16, int step, const void* q, const void* k,
                              const void* v, void* o, float* lse, const Layout& lq,
                              const Layout& lk, const Layout& lv, int B, int H, int Hkv,
                              int Sq, int Sk, int D, float scale,
                              const MaskParams& mask, cudaStream_t stream);
