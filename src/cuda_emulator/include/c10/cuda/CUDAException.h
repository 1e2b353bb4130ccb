// c10's CUDA error checks on the CPU emulator (ab.load_extension): a failed launch has
// already raised, naming its kernel.
#pragma once

#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#define C10_CUDA_KERNEL_LAUNCH_CHECK() ((void)0)
#define C10_CUDA_CHECK(expr)                                     \
  do {                                                           \
    cudaError_t attnbook_err_ = (expr);                          \
    TORCH_CHECK(attnbook_err_ == cudaSuccess, "CUDA error: ",   \
                cudaGetErrorString(attnbook_err_));              \
  } while (0)
