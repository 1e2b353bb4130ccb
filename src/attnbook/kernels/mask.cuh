// Which keys a query may attend, for every kernel of the book: the device-side twin of
// attnbook.masks (same rules, same bottom-right alignment), plus the additive mask.
#pragma once
#include "mask_params.h"

// True if query i (of Sq) may attend key j (of Sk) in batch b.
__device__ __forceinline__ bool admitted(const MaskParams& m, int b, int i, int j, int Sq, int Sk) {
  const int pos = i + Sk - Sq;
  if (m.causal && j > pos) return false;
  if (m.stride > 0 && j % m.stride != 0) return false;
  if (m.window > 0 && (pos - j >= m.window || j - pos >= m.window)) return false;
  if (m.key_lengths && j >= m.key_lengths[b]) return false;
  return true;
}

// The score after masking: -inf where not admitted, plus the additive mask where present.
__device__ __forceinline__ float masked_score(const MaskParams& m, float s, int b, int h, int i, int j,
                                              int Sq, int Sk) {
  if (!admitted(m, b, i, j, Sq, Sk)) return -INFINITY;
  if (m.bias) s += m.bias[b * m.bs0 + h * m.bs1 + i * m.bs2 + j * m.bs3];
  return s;
}
