// The torch-facing side of an extension: the wrapper functions that check tensors,
// allocate outputs and call a kernel's host launcher. Deliberately light: pybind and
// the Tensor class, not torch/extension.h (which alone takes ~20 s to compile).
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>        // at::empty, at::zeros... for outputs and workspaces
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
// pybind11 (3.x) defines in its headers the Python type of its function records,
// whose functions every translation unit then compiles: at -O0, as the binding code
// that runs at import: about 1.4 s less per build of a wrapper.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O0")
#endif
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#ifdef ATTNBOOK_EMULATOR
typedef struct CUstream_st* cudaStream_t;
#else
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace attnbook {

// DeviceGuard g(t): until the end of the scope, kernels launch on t's GPU and stream()
// is that GPU's current stream (not the current device's, which may be another GPU).
#ifdef ATTNBOOK_EMULATOR
constexpr c10::DeviceType kDevice = c10::DeviceType::CPU;
inline cudaStream_t stream() { return nullptr; }
inline void check_launch() {}   // the emulator throws at the failing launch
struct DeviceGuard {
  explicit DeviceGuard(const at::Tensor&) {}
};
#else
constexpr c10::DeviceType kDevice = c10::DeviceType::CUDA;
inline cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }
inline void check_launch() { C10_CUDA_KERNEL_LAUNCH_CHECK(); }
struct DeviceGuard {
  c10::cuda::CUDAGuard guard;
  explicit DeviceGuard(const at::Tensor& t) : guard(t.device()) {}
};
#endif

// The checks every wrapper makes before a launch: right device, dtype, and (unless the
// kernel takes strides) contiguous.
inline void check_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype,
                         bool contiguous = true) {
  TORCH_CHECK(t.device().type() == kDevice, name, " must be on ",
              kDevice == c10::DeviceType::CUDA ? "a CUDA device"
                                               : "the CPU (emulator back end)",
              ", got ", t.device());
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, ", got ",
              t.scalar_type());
  TORCH_CHECK(!contiguous || t.is_contiguous(), name, " must be contiguous");
}

}  // namespace attnbook
