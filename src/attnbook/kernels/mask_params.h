// The mask a kernel applies, as plain data: shared by the kernels (mask.cuh) and the
// C++ wrappers that fill it in, which are compiled without CUDA.
#pragma once

struct MaskParams {
  bool causal = false;
  int stride = 0;                    // 0: off; else key j must be a multiple of stride
  int window = 0;                    // 0: off; else |i + Sk - Sq - j| < window
  const int* key_lengths = nullptr;  // [B]: keys j >= key_lengths[b] are padding
  const float* bias = nullptr;       // additive mask at b*bs0 + h*bs1 + i*bs2 + j*bs3
  long long bs0 = 0, bs1 = 0, bs2 = 0, bs3 = 0;   // a stride of 0 broadcasts that dim
};
