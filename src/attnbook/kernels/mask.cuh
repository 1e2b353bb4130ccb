// Which keys a query may attend, for every kernel of the book: the device-side twin of
// attnbook.masks (same rules, same bottom-right alignment), plus the additive mask.
#pragma once
#include "mask_params.h"

// True if query i (of Sq) may attend key j (of Sk) in batch b.
__device__ __forceinline__ bool admitted(const MaskParams& m, int b, int i, int j,
                                         int Sq, int Sk) {
  const int pos = i + Sk - Sq;
  if (m.causal && j > pos) return false;
  if (m.stride > 0 && j % m.stride != 0) return false;
  if (m.window > 0 && (pos - j >= m.window || j - pos >= m.window)) return false;
  if (m.key_lengths && j >= m.key_lengths[b]) return false;
  return true;
}

// Where the additive mask of query i and key j lives (the next key's is bs3 further
// on); nullptr without an additive mask.
__device__ __forceinline__ const float* bias_at(const MaskParams& m, int b, int h,
                                                int i, int j) {
  return m.bias ? m.bias + b * m.bs0 + h * m.bs1 + i * m.bs2 + j * m.bs3 : nullptr;
}

// s plus an additive mask term: -inf where the term is -inf, so a masked key never
// contributes, whatever its dot product (NaN or inf in k included); otherwise NaN and
// +inf propagate as in PyTorch.
__device__ __forceinline__ float add_bias(float s, float bias) {
  return bias == -INFINITY ? -INFINITY : s + bias;
}

// The score after masking: -inf where not admitted, else with the additive mask added.
__device__ __forceinline__ float masked_score(const MaskParams& m, float s, int b,
                                              int h, int i, int j, int Sq, int Sk) {
  if (!admitted(m, b, i, j, Sq, Sk)) return -INFINITY;
  return m.bias ? add_bias(s, *bias_at(m, b, h, i, j)) : s;
}

// Keys [*begin, *end) hold every key that query rows [row_lo, row_hi] of batch b may
// attend: a fused kernel loads only the tiles in this range (the rest of the row is
// masked anyway).
__device__ __forceinline__ void admitted_key_range(const MaskParams& m, int b,
                                                   int row_lo, int row_hi, int Sq,
                                                   int Sk, int* begin, int* end) {
  const int lo = row_lo + Sk - Sq, hi = row_hi + Sk - Sq;   // first and last positions
  int first = 0, last = Sk;                                  // exclusive end
  if (m.causal) last = min(last, hi + 1);
  if (m.window > 0) {
    first = max(first, lo - m.window + 1);
    last = min(last, hi + m.window);
  }
  if (m.key_lengths) last = min(last, m.key_lengths[b]);
  *begin = first;
  *end = max(first, last);
}

// True if every query of rows [row_lo, row_hi] may attend every key of [j0, j1) with no
// additive term: such a tile needs no per-element mask.
__device__ __forceinline__ bool tile_unmasked(const MaskParams& m, int b, int row_lo,
                                              int row_hi, int j0, int j1, int Sq,
                                              int Sk) {
  const int lo = row_lo + Sk - Sq, hi = row_hi + Sk - Sq;
  if (m.bias || m.stride > 1 || j1 > Sk) return false;
  if (m.key_lengths && j1 > m.key_lengths[b]) return false;
  if (m.causal && j1 - 1 > lo) return false;
  if (m.window > 0 && (hi - j0 >= m.window || j1 - 1 - lo >= m.window)) return false;
  return true;
}

// True if no rule but the causal one masks keys [j0, j1) of batch b, and all of them
// exist (j1 <= Sk): no additive mask, stride, window or padding reaches them.
__device__ __forceinline__ bool tile_causal_only(const MaskParams& m, int b, int j1,
                                                 int Sk) {
  return !m.bias && m.stride <= 1 && m.window == 0 && j1 <= Sk &&
         (!m.key_lengths || j1 <= m.key_lengths[b]);
}

// Of the tiles [j0, j0 + Bc) at j0 = kv_begin + i·Bc, those that tile_unmasked admits
// for rows [row_lo, row_hi] form one run, keys [*u_begin, *u_end) (empty: both are
// kv_begin): a kernel can run them in a loop without mask code.
__device__ __forceinline__ void unmasked_tiles(const MaskParams& m, int b, int row_lo,
                                               int row_hi, int Sq, int Sk,
                                               int kv_begin, int kv_end, int Bc,
                                               int* u_begin, int* u_end) {
  *u_begin = *u_end = kv_begin;
  if (m.bias || m.stride > 1) return;
  const long long lo = (long long)row_lo + Sk - Sq, hi = (long long)row_hi + Sk - Sq;
  long long first = kv_begin, last = min(Sk, kv_end);   // j0 >= first, j0 + Bc <= last
  if (m.key_lengths) last = min(last, (long long)m.key_lengths[b]);
  if (m.causal) last = min(last, lo + 1);
  if (m.window > 0) {
    first = max(first, hi - m.window + 1);
    last = min(last, lo + m.window);
  }
  const long long start = kv_begin + (first - kv_begin + Bc - 1) / Bc * Bc;
  if (last - start < Bc) return;
  *u_begin = int(start);
  *u_end = int(start + (last - start) / Bc * Bc);
}

// Query rows [*begin, *end) hold every row of batch b that may attend some key of
// [j0, j1): the backward's key blocks visit only the query tiles in this range.
__device__ __forceinline__ void admitted_query_range(const MaskParams& m, int b, int j0,
                                                     int j1, int Sq, int Sk, int* begin,
                                                     int* end) {
  const long long off = (long long)Sk - Sq;   // query i sits at position i + off
  long long first = 0, last = Sq;              // exclusive end
  if (m.causal) first = max(first, j0 - off);
  if (m.window > 0) {
    first = max(first, j0 - m.window + 1 - off);
    last = min(last, (long long)j1 - 1 + m.window - off);
  }
  if (m.key_lengths && j0 >= m.key_lengths[b]) last = 0;
  *begin = int(min(first, (long long)Sq));
  *end = int(max((long long)*begin, last));
}
