// A program in two files, as nvcc main.cu kernels.cu -o prog builds it: main() here,
// the kernel and its launcher in kernels.cu. Prints the sum of 2*i for i < n; with
// argument "past", the kernel also reads one element past the input.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

void launch_doubled(const float* x, float* y, int n, int reach);   // kernels.cu

int main(int argc, char** argv) {
  const int n = 300;
  const int reach = argc > 1 && !std::strcmp(argv[1], "past") ? 1 : 0;
  float host[n];
  for (int i = 0; i < n; ++i) host[i] = float(i);
  float *x, *y;
  cudaMalloc(&x, sizeof host);
  cudaMalloc(&y, sizeof host);
  cudaMemcpy(x, host, sizeof host, cudaMemcpyHostToDevice);
  launch_doubled(x, y, n, reach);
  cudaMemcpy(host, y, sizeof host, cudaMemcpyDeviceToHost);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += host[i];
  std::printf("sum %.0f\n", sum);
  cudaFree(x);
  cudaFree(y);
  return 0;
}
