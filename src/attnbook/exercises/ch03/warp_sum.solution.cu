__global__ void warp_sum(const float* x, float* out, int n) {
  const int lane = threadIdx.x;
  const float* xr = x + (size_t)blockIdx.x * n;
  float sum = 0.f;
  for (int j = lane; j < n; j += 32) sum += xr[j];
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (lane == 0) out[blockIdx.x] = sum;
}
