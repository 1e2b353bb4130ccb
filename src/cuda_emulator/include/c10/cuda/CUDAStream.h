// c10's CUDA stream on the CPU emulator (ab.load_extension): one stream, which launches
// ignore.
#pragma once

#include <cuda_runtime_api.h>

namespace c10 {
namespace cuda {
struct CUDAStream {
  cudaStream_t stream() const { return nullptr; }
  operator cudaStream_t() const { return nullptr; }
};
inline CUDAStream getCurrentCUDAStream(signed char = -1) { return {}; }
inline CUDAStream getDefaultCUDAStream(signed char = -1) { return {}; }
}  // namespace cuda
}  // namespace c10
