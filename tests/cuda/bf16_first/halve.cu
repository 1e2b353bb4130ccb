// The kernel of bf16_first: y = x / 2 in bf16, converted through float.
#include <cuda_bf16.h>

__global__ void halve_kernel(const nv_bfloat16* x, nv_bfloat16* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16(0.5f * __bfloat162float(x[i]));
}

void halve_launch(const nv_bfloat16* x, nv_bfloat16* y, int n) {
  halve_kernel<<<(n + 127) / 128, 128>>>(x, y, n);
}
