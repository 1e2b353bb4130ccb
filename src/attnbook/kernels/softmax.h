// The host launcher of chapter 3's softmax kernels (softmax.cu). Host code only: the
// wrapper, compiled without CUDA, includes it too.
#pragma once
#include <cuda_runtime.h>

// y = softmax(x) along rows of n floats, x and y contiguous [rows, n], by the kernel
// named `kernel` ("naive", "block_tree", "warp", "block_warps", "online",
// "online_lean"). Returns false for an unknown name.
bool softmax_forward(const char* kernel, const float* x, float* y, int rows, int n,
                     cudaStream_t stream);
