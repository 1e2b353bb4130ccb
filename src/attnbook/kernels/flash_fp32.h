// The host launcher of chapter 7's fused fp32 forward (flash_fp32.cu). Host code only:
// the wrapper, compiled without CUDA, includes it too.
#pragma once
#include <cuda_runtime.h>

#include "layout.h"
#include "mask_params.h"

// q [B, H, Sq, D], k and v [B, Hkv, Sk, D] with strides lq, lk, lv (steps 2 and 3:
// rows on 16 bytes); o: contiguous [B, H, Sq, D]; lse: [B, H, Sq]. step: 1, 2 or 3,
// the chapter's steps; (Br, Bc): the query and key tile. Returns false, and launches
// nothing, if (step, D, Br, Bc) is not compiled.
bool flash_fwd_fp32(const float* q, const float* k, const float* v, float* o,
                    float* lse, const Layout& lq, const Layout& lk, const Layout& lv,
                    int B, int H, int Hkv, int Sq, int Sk, int D, int step, int Br,
                    int Bc, float scale, const MaskParams& mask, cudaStream_t stream);
