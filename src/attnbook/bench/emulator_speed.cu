// The kernels python -m attnbook.bench.emulator_speed times on the emulator: two
// that cost a known number of barriers or shuffles per thread, and two block
// reductions.

// `reps` barriers per thread: the time above that of reps = 0 is reps thread-barriers.
__global__ void barriers(int reps, float* out) {
  for (int i = 0; i < reps; ++i) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.f;
}

// `reps` shuffles per lane.
__global__ void shuffles(int reps, float* out) {
  float v = threadIdx.x;
  for (int i = 0; i < reps; ++i) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void tree_sum(const float* x, float* out) {
  __shared__ float s[256];
  int t = threadIdx.x;
  s[t] = x[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

__device__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

__global__ void shuffle_sum(const float* x, float* out) {
  __shared__ float partial[32];
  int t = threadIdx.x, lane = t % 32, warp = t / 32;
  float v = warp_sum(x[blockIdx.x * blockDim.x + t]);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = warp_sum(lane < blockDim.x / 32 ? partial[lane] : 0.f);   // every warp, alike
  if (t == 0) out[blockIdx.x] = v;
}

void launch_loop(bool barrier, int blocks, int reps, float* out) {
  if (barrier) barriers<<<blocks, 256>>>(reps, out);
  else shuffles<<<blocks, 256>>>(reps, out);
}

void launch_reduce(bool tree, int blocks, const float* x, float* out) {
  if (tree) tree_sum<<<blocks, 256>>>(x, out);
  else shuffle_sum<<<blocks, 256>>>(x, out);
}
