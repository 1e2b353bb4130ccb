// The mask a kernel applies, as plain data: shared by the kernels (mask.cuh) and the
// C++ wrappers that fill it in, which are compiled without CUDA.
#pragma once

// The scalar options, one line each: type, name, meaning (0 or false: off). This list
// is the one place that names them: MaskParams has a field of each, the wrappers'
// mask_params (wrapper_args.h) fills the fields from the values the Python side sends,
// and the Python side (attnbook.args.attention.MASK_OPTIONS) reads the names, and so
// the order of the values, from this file.
#define MASK_OPTIONS(X)                                                                \
  X(bool, causal) /* key j > i + Sk - Sq is masked */                                  \
  X(int, stride)  /* key j must be a multiple of stride */                             \
  X(int, window)  /* |i + Sk - Sq - j| < window */

struct MaskParams {
#define MASK_FIELD(type, name) type name = 0;
  MASK_OPTIONS(MASK_FIELD)
#undef MASK_FIELD
  const int* key_lengths = nullptr;  // [B]: keys j >= key_lengths[b] are padding
  const float* bias = nullptr;       // additive mask at b*bs0 + h*bs1 + i*bs2 + j*bs3
  long long bs0 = 0, bs1 = 0, bs2 = 0, bs3 = 0;   // a stride of 0 broadcasts that dim
};
