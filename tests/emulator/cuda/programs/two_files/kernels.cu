// The kernel of main.cu's program: y[i] = 2 x[i + reach] for the last element, 2 x[i]
// for the others.
#include <cuda_runtime.h>

__global__ void doubled(const float* x, float* y, int n, int reach) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i + (i == n - 1 ? reach : 0)];
}

void launch_doubled(const float* x, float* y, int n, int reach) {
  doubled<<<(n + 127) / 128, 128>>>(x, y, n, reach);
}
