// More of CUDA's host runtime on the CPU emulator, for host code written against the
// toolkit: the device's properties (those of a GPU of the architecture the emulator
// behaves as, ATTNBOOK_EMU_ARCH), occupancy by formula, events timed by the host clock,
// streams that run in order, more allocation and copy forms, cudaLaunchKernel. Part of
// cuda_emulator.h.
#pragma once

#include <chrono>
#include <utility>

#include "emu_builtins.h"

// ---- the device ---------------------------------------------------------------------
namespace attnbook_emu {
// An A100 (sm_80), a T4 (sm_75) or an H100 (sm_90): SMs, shared memory per SM and the
// opt-in most per block, blocks per SM, threads per SM.
struct DeviceShape { int sms, smem_sm, smem_optin, blocks_sm, threads_sm; };
constexpr DeviceShape device_shape() {
  return ATTNBOOK_EMU_ARCH >= 900 ? DeviceShape{132, 233472, 232448, 32, 2048}
       : ATTNBOOK_EMU_ARCH >= 800 ? DeviceShape{108, 167936, 166912, 32, 2048}
                                  : DeviceShape{40, 65536, 65536, 16, 1024};
}
}  // namespace attnbook_emu

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
  size_t sharedMemPerMultiprocessor, totalConstMem;
  int regsPerBlock, regsPerMultiprocessor, warpSize, maxThreadsPerBlock;
  int maxThreadsDim[3], maxGridSize[3];
  int clockRate, memoryClockRate, memoryBusWidth, l2CacheSize;
  int major, minor, multiProcessorCount, maxThreadsPerMultiProcessor;
  int maxBlocksPerMultiProcessor, concurrentKernels, unifiedAddressing, managedMemory;
};
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return cudaErrorInvalidValue;
  constexpr auto s = ::attnbook_emu::device_shape();
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "attnbook CPU emulator (sm_%d)",
                ATTNBOOK_EMU_ARCH / 10);
  p->totalGlobalMem = size_t(16) << 30;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = size_t(s.smem_optin);
  p->sharedMemPerMultiprocessor = size_t(s.smem_sm);
  p->totalConstMem = 64 * 1024;
  p->regsPerBlock = p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->clockRate = 1410000;
  p->memoryClockRate = 1215000;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 40 << 20;
  p->major = ATTNBOOK_EMU_ARCH / 100;
  p->minor = ATTNBOOK_EMU_ARCH / 10 % 10;
  p->multiProcessorCount = s.sms;
  p->maxThreadsPerMultiProcessor = s.threads_sm;
  p->maxBlocksPerMultiProcessor = s.blocks_sm;
  p->concurrentKernels = p->unifiedAddressing = p->managedMemory = 1;
  return cudaSuccess;
}

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxBlockDimX = 2,
  cudaDevAttrMaxBlockDimY = 3, cudaDevAttrMaxBlockDimZ = 4, cudaDevAttrMaxGridDimX = 5,
  cudaDevAttrMaxGridDimY = 6, cudaDevAttrMaxGridDimZ = 7,
  cudaDevAttrMaxSharedMemoryPerBlock = 8, cudaDevAttrTotalConstantMemory = 9,
  cudaDevAttrWarpSize = 10, cudaDevAttrMaxRegistersPerBlock = 12,
  cudaDevAttrClockRate = 13, cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrL2CacheSize = 38, cudaDevAttrMaxThreadsPerMultiProcessor = 39,
  cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrMaxRegistersPerMultiprocessor = 82,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
  cudaDevAttrMaxBlocksPerMultiprocessor = 106
};
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(p.sharedMemPerBlock); break;
    case cudaDevAttrTotalConstantMemory: *value = int(p.totalConstMem); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = p.regsPerBlock; break;
    case cudaDevAttrClockRate: *value = p.clockRate; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = p.maxThreadsPerMultiProcessor;
      break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = int(p.sharedMemPerMultiprocessor);
      break;
    case cudaDevAttrMaxRegistersPerMultiprocessor:
      *value = p.regsPerMultiprocessor;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = int(p.sharedMemPerBlockOptin);
      break;
    case cudaDevAttrMaxBlocksPerMultiprocessor:
      *value = p.maxBlocksPerMultiProcessor;
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
// cudaLimitStackSize: the stack each thread of the next launches gets, at most the
// 512 KiB of local memory a GPU thread may have (the emulator adds its own frames).
enum cudaLimit { cudaLimitStackSize = 0, cudaLimitPrintfFifoSize = 1,
                 cudaLimitMallocHeapSize = 2 };
inline cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  if (limit != cudaLimitStackSize) return cudaSuccess;   // the others cost nothing here
  if (value > ::attnbook_emu::kMaxLocalBytes) return cudaErrorInvalidValue;
  ::attnbook_emu::host().stack_limit.store(value);
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  switch (limit) {
    case cudaLimitStackSize: *value = ::attnbook_emu::host().stack_limit.load(); break;
    case cudaLimitPrintfFifoSize: *value = 1 << 20; break;
    case cudaLimitMallocHeapSize: *value = 8 << 20; break;
    default: return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaDeviceReset() { return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int* v) { *v = 12040; return cudaSuccess; }
inline cudaError_t cudaDriverGetVersion(int* v) { *v = 12040; return cudaSuccess; }
inline const char* cudaGetErrorName(cudaError_t e) {
  return e == cudaSuccess ? "cudaSuccess"
       : e == cudaErrorInvalidValue ? "cudaErrorInvalidValue"
                                    : "cudaErrorMemoryAllocation";
}

// ---- kernel attributes and occupancy ------------------------------------------------
enum cudaSharedCarveout {
  cudaSharedmemCarveoutDefault = -1, cudaSharedmemCarveoutMaxShared = 100,
  cudaSharedmemCarveoutMaxL1 = 0
};
enum cudaFuncCache {
  cudaFuncCachePreferNone = 0, cudaFuncCachePreferShared = 1, cudaFuncCachePreferL1 = 2,
  cudaFuncCachePreferEqual = 3
};
// The emulator has no L1 to trade for shared memory: cache preferences change nothing.
template <class F> inline cudaError_t cudaFuncSetCacheConfig(F*, cudaFuncCache) {
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache) { return cudaSuccess; }

namespace attnbook_emu {
// Blocks of `threads` threads and `smem` bytes of dynamic shared memory that fit on one
// SM, by threads, block slots and shared memory (registers and static shared memory are
// unknown to the emulator: compile for a GPU and read the ptxas report for those).
inline int blocks_per_sm(int threads, size_t smem) {
  constexpr auto s = ::attnbook_emu::device_shape();
  if (threads < 1 || threads > 1024) return 0;
  int warps = (threads + 31) / 32;
  int by_threads = s.threads_sm / (32 * warps);
  int by_smem = smem ? int(size_t(s.smem_sm) / smem) : s.blocks_sm;
  return std::min({by_threads, by_smem, s.blocks_sm});
}
}  // namespace attnbook_emu
template <class F>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F*,
                                                                 int threads,
                                                                 size_t smem) {
  *n = ::attnbook_emu::blocks_per_sm(threads, smem);
  return cudaSuccess;
}
template <class F>
inline cudaError_t cudaOccupancyMaxPotentialBlockSize(int* min_grid, int* block, F*,
                                                      size_t smem = 0, int limit = 0) {
  int best = 0;
  *block = 32;
  for (int t = (limit > 0 ? std::min(limit, 1024) : 1024) / 32 * 32; t >= 32; t -= 32)
    if (::attnbook_emu::blocks_per_sm(t, smem) * t > best) {
      best = ::attnbook_emu::blocks_per_sm(t, smem) * t;
      *block = t;
    }
  *min_grid = ::attnbook_emu::blocks_per_sm(*block, smem) *
              ::attnbook_emu::device_shape().sms;
  return cudaSuccess;
}

// ---- events and streams: launches run to completion in order ------------------------
struct CUevent_st { std::chrono::steady_clock::time_point t; };
typedef CUevent_st* cudaEvent_t;
constexpr unsigned cudaEventDefault = 0, cudaEventBlockingSync = 1,
                   cudaEventDisableTiming = 2;
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st{std::chrono::steady_clock::now()};
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  return cudaEventCreate(e);
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
  e->t = std::chrono::steady_clock::now();
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
// Milliseconds of CPU time between the events: the emulator's, not a GPU's.
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) {
  static char token;   // any non-null stream: launches ignore it
  *s = reinterpret_cast<cudaStream_t>(&token);
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  return cudaStreamCreate(s);
}
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) {
  return cudaSuccess;
}

// ---- memory -------------------------------------------------------------------------
inline cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }
template <class T> inline cudaError_t cudaMallocHost(T** p, size_t n) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  return cudaMalloc(p, n);
}
inline cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
template <class T> inline cudaError_t cudaMallocManaged(T** p, size_t n, unsigned = 1) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
template <class T> inline cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
inline cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *free = *total = size_t(16) << 30;
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2D(void* d, size_t dpitch, const void* s, size_t spitch,
                                size_t width, size_t height, cudaMemcpyKind) {
  for (size_t r = 0; r < height; ++r)
    std::memcpy(static_cast<char*>(d) + r * dpitch,
                static_cast<const char*>(s) + r * spitch, width);
  return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t n,
                                        size_t offset = 0,
                                        cudaMemcpyKind = cudaMemcpyDeviceToHost) {
  std::memcpy(dst, reinterpret_cast<const char*>(&symbol) + offset, n);
  return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* src, size_t n,
                                           size_t offset = 0,
                                           cudaMemcpyKind kind = cudaMemcpyHostToDevice,
                                           cudaStream_t = nullptr) {
  return cudaMemcpyToSymbol(symbol, src, n, offset, kind);
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbolAsync(
    void* dst, const T& symbol, size_t n, size_t offset = 0,
    cudaMemcpyKind kind = cudaMemcpyDeviceToHost, cudaStream_t = nullptr) {
  return cudaMemcpyFromSymbol(dst, symbol, n, offset, kind);
}
template <class T> inline cudaError_t cudaGetSymbolAddress(void** p, const T& symbol) {
  *p = const_cast<void*>(static_cast<const void*>(&symbol));
  return cudaSuccess;
}

// ---- cudaLaunchKernel: args[i] points at the kernel's i-th argument -----------------
namespace attnbook_emu {
template <class... P, size_t... I>
inline void launch_with(void (*k)(P...), dim3 g, dim3 b, void** args, size_t smem,
                        std::index_sequence<I...>) {
  launch_of(k, "kernel launched with cudaLaunchKernel")
      .cfg(g, b, smem)(*static_cast<std::remove_reference_t<P>*>(args[I])...);
}
}  // namespace attnbook_emu
template <class... P>
inline cudaError_t cudaLaunchKernel(void (*k)(P...), dim3 grid, dim3 block, void** args,
                                    size_t smem = 0, cudaStream_t = nullptr) {
  ::attnbook_emu::launch_with(k, grid, block, args, smem,
                              std::index_sequence_for<P...>{});
  return cudaSuccess;
}
