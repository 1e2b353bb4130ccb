// ATen's CUDA context on the CPU emulator (ab.load_extension): the current stream and
// the device's properties (those cudaGetDeviceProperties reports).
#pragma once

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
namespace at {
namespace cuda {
using c10::cuda::CUDAStream;
using c10::cuda::getCurrentCUDAStream;
using c10::cuda::getDefaultCUDAStream;
inline cudaDeviceProp* getCurrentDeviceProperties() {
  static cudaDeviceProp p = [] {
    cudaDeviceProp q;
    cudaGetDeviceProperties(&q, 0);
    return q;
  }();
  return &p;
}
}  // namespace cuda
}  // namespace at
