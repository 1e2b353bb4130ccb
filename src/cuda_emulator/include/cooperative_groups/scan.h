// cg::inclusive_scan and cg::exclusive_scan over a tile on the CPU emulator (in the
// CUDA toolkit too, they are declared here and not by <cooperative_groups.h>).
#pragma once
#include "reduce.h"

namespace cooperative_groups {

// Thread r gets op folded over the values of ranks 0..r, in rank order (a scan by
// shuffles up: after the step of distance d, each value covers 2d ranks).
template <unsigned N, class T, class Op = plus<T>>
inline T inclusive_scan(const thread_block_tile<N>& g, T v, Op op = {}) {
  for (unsigned d = 1; d < N; d *= 2) {
    const T earlier = g.shfl_up(v, d);
    if (g.thread_rank() >= d) v = op(earlier, v);
  }
  return v;
}

// Ranks 0..r-1; rank 0 gets T() (CUDA leaves it unspecified but for plus, where it is
// 0).
template <unsigned N, class T, class Op = plus<T>>
inline T exclusive_scan(const thread_block_tile<N>& g, T v, Op op = {}) {
  const T before = g.shfl_up(inclusive_scan(g, v, op), 1);
  return g.thread_rank() == 0 ? T() : before;
}

}  // namespace cooperative_groups
