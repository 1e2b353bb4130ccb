// A header beside a reader's kernel, found through compile(include_dirs=...).
#pragma once
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
