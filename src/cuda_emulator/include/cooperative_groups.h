// Cooperative groups on the CPU emulator: the block, tiles of 1 to 32 threads of a warp
// (tiled_partition<N>) with their shuffles, votes and sync. A tile is a group of lanes:
// its collectives are warp collectives over the tile's lane mask. As in the CUDA
// toolkit, cg::reduce and its operators need <cooperative_groups/reduce.h> and
// cg::memcpy_async needs <cooperative_groups/memcpy_async.h>.
// grid_group::sync needs a cooperative launch, which the emulator does not run.
#pragma once

#include "cuda_emulator.h"

namespace cooperative_groups {

struct thread_block {
  void sync() const { __syncthreads(); }
  unsigned thread_rank() const { return unsigned(::attnbook_emu::rt().cur->linear); }
  unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
  unsigned num_threads() const { return size(); }
  dim3 group_index() const { return {blockIdx.x, blockIdx.y, blockIdx.z}; }
  dim3 thread_index() const { return {threadIdx.x, threadIdx.y, threadIdx.z}; }
  dim3 group_dim() const { return blockDim; }
  dim3 dim_threads() const { return blockDim; }
};
inline thread_block this_thread_block() { return {}; }
inline void sync(const thread_block& g) { g.sync(); }

struct grid_group {
  void sync() const {
    ::attnbook_emu::fail("grid_group::sync() needs a cooperative launch "
                         "(cudaLaunchCooperativeKernel), which the emulator does "
                         "not run");
  }
  unsigned long long thread_rank() const {
    unsigned long long block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y *
                                                         1ull * blockIdx.z);
    return block * (blockDim.x * blockDim.y * blockDim.z) +
           unsigned(::attnbook_emu::rt().cur->linear);
  }
  unsigned long long size() const {
    return 1ull * gridDim.x * gridDim.y * gridDim.z * blockDim.x * blockDim.y *
           blockDim.z;
  }
  unsigned long long num_threads() const { return size(); }
};
inline grid_group this_grid() { return {}; }

template <unsigned N>
struct thread_block_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0,
                "tiled_partition<N>: N must be a power of two no larger than 32");
  static unsigned linear() { return unsigned(::attnbook_emu::rt().cur->linear); }
  unsigned thread_rank() const { return linear() % N; }
  static constexpr unsigned size() { return N; }
  static constexpr unsigned num_threads() { return N; }
  unsigned meta_group_rank() const { return linear() / N; }
  unsigned meta_group_size() const {
    return (::attnbook_emu::rt().nthreads + N - 1) / N;
  }
  // The tile's lanes within its warp.
  unsigned mask() const {
    unsigned base = linear() % 32 & ~(N - 1);
    return (N == 32 ? 0xffffffffu : ((1u << N) - 1u) << base) &
           ::attnbook_emu::existing_lanes(int(linear() / 32));
  }
  void sync() const { __syncwarp(mask()); }
  template <class T> T shfl(T v, int src) const {
    return __shfl_sync(mask(), v, src, N);
  }
  template <class T> T shfl_down(T v, unsigned d) const {
    return __shfl_down_sync(mask(), v, d, N);
  }
  template <class T> T shfl_up(T v, unsigned d) const {
    return __shfl_up_sync(mask(), v, d, N);
  }
  template <class T> T shfl_xor(T v, unsigned m) const {
    return __shfl_xor_sync(mask(), v, m, N);
  }
  unsigned ballot(int pred) const {
    return (__ballot_sync(mask(), pred) >> (linear() % 32 & ~(N - 1))) &
           (N == 32 ? 0xffffffffu : (1u << N) - 1u);
  }
  int any(int pred) const { return __any_sync(mask(), pred); }
  int all(int pred) const { return __all_sync(mask(), pred); }
};

template <unsigned N, class Parent>
inline thread_block_tile<N> tiled_partition(const Parent&) { return {}; }
template <unsigned N>
inline void sync(const thread_block_tile<N>& g) { g.sync(); }

}  // namespace cooperative_groups
