// c10's device guards on the CPU emulator (ab.load_extension): one device, nothing to
// switch.
#pragma once

#include <optional>

#include <c10/core/Device.h>

namespace c10 {
namespace cuda {
struct CUDAGuard {
  explicit CUDAGuard(c10::Device) {}
  explicit CUDAGuard(c10::DeviceIndex) {}
};
struct OptionalCUDAGuard {
  OptionalCUDAGuard() = default;
  explicit OptionalCUDAGuard(c10::Device) {}
  explicit OptionalCUDAGuard(std::optional<c10::Device>) {}
};
}  // namespace cuda
}  // namespace c10
namespace at {
namespace cuda {
using c10::cuda::CUDAGuard;
using c10::cuda::OptionalCUDAGuard;
}  // namespace cuda
}  // namespace at
