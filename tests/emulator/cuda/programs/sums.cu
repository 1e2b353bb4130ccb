// A CUDA program as one is written for nvcc: its own main(), cudaMalloc, cudaMemcpy, a
// launch (through a helper of "launch.cuh", found with -I). argv[1] chooses what it
// does: "sum" prints the sum of 0..n-1 times SCALE (-D), "status" exits with 3, "far"
// writes far out of bounds, "past" reads one element past the end, "next" 40 past it
// (where the next buffer would start, were buffers packed), "freed" reads x
// after freeing it (4 MiB then: memory malloc gives back to the system, which no later
// allocation of the program or the emulator can reuse before the kernel reads it),
// "unwritten" forgets to copy x to the device (its elements from 500 on).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include "launch.cuh"

__global__ void scaled(const float* x, float* y, int n, long long reach) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = SCALE * x[i + (i == n - 1 ? reach : 0)];
  if (reach > 1000 && i == 0) y[reach] = 1.f;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "sum";
  if (!std::strcmp(mode, "status")) return 3;
  const int n = 1000;
  long long reach = !std::strcmp(mode, "far") ? (1ll << 40) :
                    !std::strcmp(mode, "past") ? 1 :
                    !std::strcmp(mode, "next") ? 40 : 0;
  float host[n];
  for (int i = 0; i < n; ++i) host[i] = float(i);
  const bool freed = !std::strcmp(mode, "freed");
  float *x, *y;
  cudaMalloc(&x, (freed ? 1 << 20 : n) * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  const bool unwritten = !std::strcmp(mode, "unwritten");
  cudaMemcpy(x, host, sizeof host / (unwritten ? 2 : 1), cudaMemcpyHostToDevice);
  if (freed) cudaFree(x);
  launch_scaled(x, y, n, reach);
  cudaMemcpy(host, y, sizeof host, cudaMemcpyDeviceToHost);
  double sum = 0;
  for (int i = 0; i < n - 1; ++i) sum += host[i];
  printf("sum %.0f\n", sum);
  if (!freed) cudaFree(x);
  cudaFree(y);
  return 0;
}
