// The kernels of a two-file torch extension (main.cpp binds them), as many projects
// split theirs. `past_end` makes the last thread write one element past the end.
#include <cuda_runtime.h>

__global__ void scale_kernel(float* x, int n, float factor, bool past_end) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor * FACTOR;
  if (past_end && i == n - 1) x[n] = 0.f;
}

void scale_launch(float* x, int n, float factor, bool past_end) {
  scale_kernel<<<(n + 127) / 128, 128>>>(x, n, factor, past_end);
}
