// The max of a row of scores must see a NaN: fmaxf(a, NaN) = a would drop it and leave
// a finite row where PyTorch gives NaN. This max returns NaN if either operand is NaN,
// as torch.max does (used by the softmax kernels and the fused attention kernels).
#pragma once

__device__ __forceinline__ float max_nan(float a, float b) {
  return a > b || a != a ? a : b;
}
