// Sum and max of a value across the 32 lanes of a warp, used by the softmax kernels
// (chapter 3) and the decode kernel (chapter 9). Every lane of the warp must call them.
#pragma once

#include "max_nan.cuh"

// Reductions inside a warp need neither shared memory nor barriers: __shfl_xor_sync
// hands each lane the value of lane ^ offset, and after offsets 16, 8, 4, 2, 1 every
// lane holds the result.
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
