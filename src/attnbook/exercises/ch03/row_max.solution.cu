#include "max_nan.cuh"

__global__ void row_max(const float* x, float* out, int n) {
  __shared__ float buf[256];
  const int t = threadIdx.x;
  const float* xr = x + (size_t)blockIdx.x * n;
  float m = -INFINITY;
  for (int j = t; j < n; j += 256) m = max_nan(m, xr[j]);
  buf[t] = m;
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (t < half) buf[t] = max_nan(buf[t], buf[t + half]);
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}
