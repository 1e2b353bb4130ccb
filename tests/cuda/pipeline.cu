// libcu++'s cuda::pipeline as kernels online use it: a thread's own pipeline
// (cuda::make_pipeline()) and a block's (cuda::make_pipeline(block, &shared_state)),
// two stages each, staging tiles of x in shared memory with cuda::memcpy_async. nvcc
// compiles this file as it is; so does the emulator (tests/test_foreign.py).
#include <cooperative_groups.h>
#include <cuda/pipeline>

namespace cg = cooperative_groups;
constexpr int kStages = 2;

// out[b][t] = the sum over tiles of the float4 x[b][tile][t] (x: [blocks][tiles][n]):
// each thread stages its own piece, a tile ahead of the one it adds up.
__global__ void own_pieces(const float4* x, float* out, int tiles) {
  extern __shared__ float4 stage[];              // [kStages][blockDim.x]
  cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
  const int t = threadIdx.x, n = blockDim.x;
  x += blockIdx.x * tiles * n;
  auto fetch = [&](int tile) {
    pipe.producer_acquire();
    if (tile < tiles)
      cuda::memcpy_async(&stage[(tile % kStages) * n + t], &x[tile * n + t],
                         sizeof(float4), pipe);
    pipe.producer_commit();
  };
  float sum = 0.f;
  fetch(0);
  for (int tile = 0; tile < tiles; ++tile) {
    fetch(tile + 1);
    pipe.consumer_wait();
    const float4 v = stage[(tile % kStages) * n + t];
    sum += v.x + v.y + v.z + v.w;
    pipe.consumer_release();
  }
  out[blockIdx.x * n + t] = sum;
}

// out[i] = the sum over tiles of x[tile][blockDim.x - 1 - i]: the block stages each
// tile of blockDim.x floats together, each thread reads another's share.
__global__ void shared_tiles(const float* x, float* out, int tiles) {
  extern __shared__ float tile_of[];              // [kStages][blockDim.x]
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, kStages> state;
  cg::thread_block block = cg::this_thread_block();
  auto pipe = cuda::make_pipeline(block, &state);
  const int n = blockDim.x;
  auto fetch = [&](int tile) {
    pipe.producer_acquire();
    if (tile < tiles)
      cuda::memcpy_async(block, &tile_of[(tile % kStages) * n], &x[tile * n],
                         sizeof(float) * n, pipe);
    pipe.producer_commit();
  };
  float sum = 0.f;
  for (int tile = 0; tile < kStages - 1; ++tile) fetch(tile);
  for (int tile = 0; tile < tiles; ++tile) {
    fetch(tile + kStages - 1);
    pipe.consumer_wait();
    sum += tile_of[(tile % kStages) * n + n - 1 - threadIdx.x];
    pipe.consumer_release();
  }
  out[threadIdx.x] = sum;
}

void launch_own_pieces(const float* x, float* out, int blocks, int threads,
                       int tiles) {
  own_pieces<<<blocks, threads, kStages * threads * sizeof(float4)>>>(
      reinterpret_cast<const float4*>(x), out, tiles);
}

void launch_shared_tiles(const float* x, float* out, int threads, int tiles) {
  shared_tiles<<<1, threads, kStages * threads * sizeof(float)>>>(x, out, tiles);
}
