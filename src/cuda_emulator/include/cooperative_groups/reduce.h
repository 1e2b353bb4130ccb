// cg::reduce and its operators on the CPU emulator (in the CUDA toolkit too, they are
// declared here and not by <cooperative_groups.h>).
#pragma once
#include "../cooperative_groups.h"

namespace cooperative_groups {

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less {
  T operator()(T a, T b) const { return b < a ? b : a; }
};
template <class T> struct greater {
  T operator()(T a, T b) const { return a < b ? b : a; }
};
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

// Every thread of the tile gets op folded over the tile's values (a butterfly).
template <unsigned N, class T, class Op>
inline T reduce(const thread_block_tile<N>& g, T v, Op op) {
  for (unsigned m = N / 2; m > 0; m /= 2) v = op(v, g.shfl_xor(v, m));
  return v;
}

}  // namespace cooperative_groups
