// CUDA's built-ins on the CPU emulator: qualifiers, the thread's coordinates,
// barriers, warp collectives, atomics, vector and half types, math, tensor-core
// fragments. Part of cuda_emulator.h, which adds the rarer built-ins, inline PTX and
// the host API; semantics follow the CUDA C++ Programming Guide and, for tensor-core
// fragments, the PTX ISA's per-lane layouts.
#pragma once
#define ATTNBOOK_EMULATOR 1

#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

#include "emu_runtime.h"
#include "emu_hooks.h"

// The architecture the emulator behaves as: compile(arch="sm_75") sets it (sm_80 by
// default); cuda_emulator.h names it __CUDA_ARCH__ once every host header is read.
#ifndef ATTNBOOK_EMU_ARCH
#define ATTNBOOK_EMU_ARCH 800
#endif
// 1 for an architecture's "a" form (sm_90a): its features, such as wgmma.
#ifndef ATTNBOOK_EMU_ARCH_FEATURES
#define ATTNBOOK_EMU_ARCH_FEATURES 0
#endif

// ---- qualifiers and the thread's coordinates ----------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __constant__
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
// One instance per kernel and worker, shared by the fibers of the worker's block.
#define __shared__ static thread_local
#define threadIdx (::attnbook_emu::rt().cur->tid)
#define blockIdx (::attnbook_emu::rt().block_idx)
#define blockDim (::attnbook_emu::rt().block)
#define gridDim (::attnbook_emu::rt().grid)
constexpr int warpSize = 32;

// ---- barriers and warp collectives --------------------------------------------------
// Object-like macros that construct a callable tagged with the line of the call, so the
// emulator can name the barrier in its diagnostics: __syncthreads() is SyncAt{line}().
#define __syncthreads ::attnbook_emu::SyncAt{__LINE__}
#define __syncthreads_count ::attnbook_emu::SyncCountAt{__LINE__}
#define __syncthreads_and ::attnbook_emu::SyncAndAt{__LINE__}
#define __syncthreads_or ::attnbook_emu::SyncOrAt{__LINE__}
#define __syncwarp ::attnbook_emu::SyncwarpAt{__LINE__}
#define __shfl_sync ::attnbook_emu::ShflAt<::attnbook_emu::Shfl::Idx>{__LINE__}
#define __shfl_up_sync ::attnbook_emu::ShflAt<::attnbook_emu::Shfl::Up>{__LINE__}
#define __shfl_down_sync ::attnbook_emu::ShflAt<::attnbook_emu::Shfl::Down>{__LINE__}
#define __shfl_xor_sync ::attnbook_emu::ShflAt<::attnbook_emu::Shfl::Xor>{__LINE__}
#define __ballot_sync ::attnbook_emu::VoteAt<::attnbook_emu::Vote::Ballot>{__LINE__}
#define __any_sync ::attnbook_emu::VoteAt<::attnbook_emu::Vote::Any>{__LINE__}
#define __all_sync ::attnbook_emu::VoteAt<::attnbook_emu::Vote::All>{__LINE__}

namespace attnbook_emu {

// note_barrier: the checked build's profile counts barriers by call site, the kernel
// line these calls are inlined into (hence always_inline).
#define ATTNBOOK_AT_CALL_SITE __attribute__((always_inline))
struct SyncAt {
  int line;
  ATTNBOOK_AT_CALL_SITE void operator()() const { note_barrier(), syncthreads(line); }
};
struct SyncCountAt {
  int line;
  ATTNBOOK_AT_CALL_SITE int operator()(int p) const {
    return note_barrier(), syncthreads(line, p);
  }
};
struct SyncAndAt {
  int line;
  ATTNBOOK_AT_CALL_SITE int operator()(int p) const {
    return note_barrier(), syncthreads(line, p) == rt().nthreads;
  }
};
struct SyncOrAt {
  int line;
  ATTNBOOK_AT_CALL_SITE int operator()(int p) const {
    return note_barrier(), syncthreads(line, p) > 0;
  }
};
struct SyncwarpAt {
  int line;
  void operator()(unsigned mask = 0xffffffffu) const {
    warp_collective(mask, line, nullptr, [](void* const*, uint32_t) {});
  }
};

enum class Shfl { Idx, Up, Down, Xor };
struct ShflLane { uint64_t value, result; int arg, width; };

template <Shfl kind>
void shfl_all(void* const* data, uint32_t group) {
  for (int l = 0; l < kWarp; ++l) {
    if (!(group & (1u << l))) continue;
    auto* d = static_cast<ShflLane*>(data[l]);
    int w = d->width, base = l & ~(w - 1), src;
    switch (kind) {
      case Shfl::Idx: src = base + (d->arg & (w - 1)); break;
      case Shfl::Up: src = (l - base) >= d->arg ? l - d->arg : l; break;
      case Shfl::Down: src = (l - base) + d->arg < w ? l + d->arg : l; break;
      // A lane of a later group of `width` lanes is out of reach: the own value (an
      // earlier group's lane is not; CUDA Programming Guide, __shfl_xor_sync).
      default: src = (l ^ d->arg) < base + w ? (l ^ d->arg) : l; break;
    }
    // A lane outside the group has no defined value: hand back all-ones (NaN) so it
    // shows.
    d->result = (group & (1u << src)) ? static_cast<ShflLane*>(data[src])->value
                                      : ~uint64_t(0);
  }
}

template <Shfl kind>
struct ShflAt {
  int line;
  template <class T>
  T operator()(unsigned mask, T var, int arg, int width = kWarp) const {
  static_assert(sizeof(T) <= 8, "__shfl_*_sync moves at most 8 bytes");
  if (width < 1 || width > kWarp || (width & (width - 1)))
    leave_kernel(),
        fail("__shfl_*_sync: width must be a power of two no larger than 32");
  ShflLane d{0, 0, arg, width};
  std::memcpy(&d.value, &var, sizeof(T));
  warp_collective(mask, line, &d, &shfl_all<kind>);
  T out;
  std::memcpy(&out, &d.result, sizeof(T));
  return out;
  }
};

enum class Vote { Ballot, Any, All };
struct VoteLane { int pred; unsigned result; };
inline unsigned ballot(int line, unsigned mask, int pred) {
  VoteLane d{pred != 0, 0};
  warp_collective(mask, line, &d, [](void* const* data, uint32_t group) {
    unsigned bits = 0;
    for (int l = 0; l < kWarp; ++l)
      if ((group & (1u << l)) && static_cast<VoteLane*>(data[l])->pred) bits |= 1u << l;
    for (int l = 0; l < kWarp; ++l)
      if (group & (1u << l)) static_cast<VoteLane*>(data[l])->result = bits;
  });
  return d.result;
}
template <Vote kind>
struct VoteAt {
  int line;
  auto operator()(unsigned mask, int pred) const {
    unsigned bits = ballot(line, mask, pred);
    if constexpr (kind == Vote::Ballot) return bits;
    else if constexpr (kind == Vote::Any) return int(bits != 0);
    else return int(bits == (mask & existing_lanes(rt().cur->linear / kWarp)));
  }
};

[[noreturn]] inline void assert_fail(const char* expr, int line) {
  leave_kernel();
  char buf[256];
  std::snprintf(buf, sizeof buf, "device assert failed on line %d: %s", line, expr);
  fail(buf);
}

}  // namespace attnbook_emu

inline unsigned __activemask() {
  auto& r = ::attnbook_emu::rt();
  return ::attnbook_emu::existing_lanes(r.cur->linear / 32);
}
[[noreturn]] inline void __trap() {
  ::attnbook_emu::leave_kernel();
  ::attnbook_emu::fail("__trap() called");
}
// A failed device assert is a Python exception naming the line, not the host's abort().
// The stand-ins cassert and assert.h beside this file restore it when kernel text
// includes the standard header (which redefines assert at every inclusion).
#define ATTNBOOK_EMULATOR_ASSERT(e) \
  ((e) ? (void)0 : ::attnbook_emu::assert_fail(#e, __LINE__))
#undef assert
#define assert(e) ATTNBOOK_EMULATOR_ASSERT(e)
// Blocks run in parallel; a block's fibers take turns on one OS thread.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() {}
inline void __nanosleep(unsigned) {}
inline long long clock64() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}
inline long clock() { return long(clock64()); }
template <class T> inline T __ldg(const T* p) { return *p; }

// ---- atomics: real ones, since blocks run on several OS threads at once -------------
// Sequentially consistent: on x86 every read-modify-write is a full barrier anyway.
namespace attnbook_emu {
constexpr int kSeqCst = __ATOMIC_SEQ_CST;
template <class T, class F>
inline T atomic_update(T* p, F f) {   // any T of 2, 4 or 8 bytes: floats, __half2 too
  T old, next;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  do next = f(old);
  while (!__atomic_compare_exchange(p, &old, &next, true, kSeqCst, __ATOMIC_RELAXED));
  return old;
}
// The checked build's atomic hooks name the kernel line that called them by their
// return address; where an atomic is a kernel's last act, GCC would jump to the hook (a
// sibling call), whose return address would then be the kernel's caller's. An empty
// asm after the call keeps it a call.
template <class T> inline T called(T value) {
#ifdef ATTNBOOK_CHECKED
  asm volatile("");
#endif
  return value;
}
}  // namespace attnbook_emu
// CUDA's atomics are overloads by the pointer's type: the value converts to it
// (atomicAdd(unsigned*, int) adds to an unsigned), so only the pointer deduces T.
template <class T> inline T atomicAdd(T* p, std::type_identity_t<T> v) {
  if constexpr (std::is_integral_v<T>)
    return ::attnbook_emu::called(__atomic_fetch_add(p, v, ::attnbook_emu::kSeqCst));
  else
    return ::attnbook_emu::atomic_update(p, [v](T o) { return T(o + v); });
}
template <class T> inline T atomicSub(T* p, std::type_identity_t<T> v) {
  return ::attnbook_emu::called(__atomic_fetch_sub(p, v, ::attnbook_emu::kSeqCst));
}
template <class T> inline T atomicExch(T* p, std::type_identity_t<T> v) {
  T old;
  __atomic_exchange(p, &v, &old, ::attnbook_emu::kSeqCst);
  return ::attnbook_emu::called(old);
}
template <class T> inline T atomicMax(T* p, std::type_identity_t<T> v) {
  return ::attnbook_emu::atomic_update(p, [v](T o) { return o < v ? v : o; });
}
template <class T> inline T atomicMin(T* p, std::type_identity_t<T> v) {
  return ::attnbook_emu::atomic_update(p, [v](T o) { return v < o ? v : o; });
}
template <class T> inline T atomicAnd(T* p, std::type_identity_t<T> v) {
  return ::attnbook_emu::called(__atomic_fetch_and(p, v, ::attnbook_emu::kSeqCst));
}
template <class T> inline T atomicOr(T* p, std::type_identity_t<T> v) {
  return ::attnbook_emu::called(__atomic_fetch_or(p, v, ::attnbook_emu::kSeqCst));
}
template <class T> inline T atomicXor(T* p, std::type_identity_t<T> v) {
  return ::attnbook_emu::called(__atomic_fetch_xor(p, v, ::attnbook_emu::kSeqCst));
}
template <class T>
inline T atomicCAS(T* p, std::type_identity_t<T> cmp, std::type_identity_t<T> v) {
  __atomic_compare_exchange(p, &cmp, &v, false, ::attnbook_emu::kSeqCst,
                            ::attnbook_emu::kSeqCst);
  return cmp;   // the old value, whether or not it matched
}
inline unsigned atomicInc(unsigned* p, unsigned lim) {
  return ::attnbook_emu::atomic_update(
      p, [lim](unsigned o) { return o >= lim ? 0 : o + 1; });
}
inline unsigned atomicDec(unsigned* p, unsigned lim) {
  return ::attnbook_emu::atomic_update(
      p, [lim](unsigned o) { return (o == 0 || o > lim) ? lim : o - 1; });
}

// ---- integer and float intrinsics ---------------------------------------------------
// CUDA's overloaded min/max: exact overloads for floating point (NaN-ignoring, like
// fminf), the usual arithmetic conversions for everything else.
template <class A, class B> inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return C(b) < C(a) ? C(b) : C(a);
}
template <class A, class B> inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return C(a) < C(b) ? C(b) : C(a);
}
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
// CUDA's math API declares these in the global namespace, for device and host code;
// <cmath> leaves them in std only.
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;

template <class To, class From> inline To attnbook_bits(From f) {
  To t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}
inline int __float_as_int(float x) { return attnbook_bits<int>(x); }
inline unsigned __float_as_uint(float x) { return attnbook_bits<unsigned>(x); }
inline float __int_as_float(int x) { return attnbook_bits<float>(x); }
inline float __uint_as_float(unsigned x) { return attnbook_bits<float>(x); }
inline long long __double_as_longlong(double x) { return attnbook_bits<long long>(x); }
inline double __longlong_as_double(long long x) { return attnbook_bits<double>(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll((unsigned long long)x);
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return unsigned((uint64_t(a) * b) >> 32);
}
inline int __mulhi(int a, int b) { return int((int64_t(a) * b) >> 32); }
inline int __mul24(int a, int b) { return (a << 8 >> 8) * (b << 8 >> 8); }
inline unsigned __umul24(unsigned a, unsigned b) {
  return (a & 0xffffff) * (b & 0xffffff);
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  uint64_t v = (uint64_t(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i)
    r |= unsigned((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.f / sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) {
  return x < 0.f ? 0.f : (x > 1.f ? 1.f : (x == x ? x : 0.f));
}
inline int __float2int_rn(float x) { return int(nearbyintf(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline int __float2int_rd(float x) { return int(floorf(x)); }
inline int __float2int_ru(float x) { return int(ceilf(x)); }
inline unsigned __float2uint_rn(float x) { return unsigned(nearbyintf(x)); }
inline float __int2float_rn(int x) { return float(x); }

// ---- vector types -------------------------------------------------------------------
#define ATTNBOOK_VEC1(T, N, A) struct __attribute__((aligned(A))) N##1 { T x; }; \
  inline N##1 make_##N##1(T x) { return {x}; }
#define ATTNBOOK_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; }; \
  inline N##2 make_##N##2(T x, T y) { return {x, y}; }
#define ATTNBOOK_VEC3(T, N) struct N##3 { T x, y, z; }; \
  inline N##3 make_##N##3(T x, T y, T z) { return {x, y, z}; }
#define ATTNBOOK_VEC4(T, N, A) \
  struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return {x, y, z, w}; }
ATTNBOOK_VEC2(float, float, 8)
ATTNBOOK_VEC4(float, float, 16)
ATTNBOOK_VEC2(int, int, 8)
ATTNBOOK_VEC4(int, int, 16)
ATTNBOOK_VEC2(unsigned, uint, 8)
ATTNBOOK_VEC4(unsigned, uint, 16)
ATTNBOOK_VEC2(double, double, 16)
ATTNBOOK_VEC2(short, short, 4)
ATTNBOOK_VEC2(unsigned short, ushort, 4)
ATTNBOOK_VEC4(signed char, char, 4)
ATTNBOOK_VEC4(unsigned char, uchar, 4)
ATTNBOOK_VEC1(float, float, 4)
ATTNBOOK_VEC1(int, int, 4)
ATTNBOOK_VEC1(unsigned, uint, 4)
ATTNBOOK_VEC2(signed char, char, 2)
ATTNBOOK_VEC2(unsigned char, uchar, 2)
ATTNBOOK_VEC3(signed char, char)
ATTNBOOK_VEC3(unsigned char, uchar)
ATTNBOOK_VEC3(short, short)
ATTNBOOK_VEC3(unsigned short, ushort)
ATTNBOOK_VEC4(short, short, 8)
ATTNBOOK_VEC4(unsigned short, ushort, 8)
ATTNBOOK_VEC2(long long, longlong, 16)
ATTNBOOK_VEC2(unsigned long long, ulonglong, 16)
ATTNBOOK_VEC4(long long, longlong, 16)
ATTNBOOK_VEC4(unsigned long long, ulonglong, 16)
ATTNBOOK_VEC2(long, long, 16)
ATTNBOOK_VEC2(unsigned long, ulong, 16)
ATTNBOOK_VEC3(double, double)
ATTNBOOK_VEC4(double, double, 16)
#undef ATTNBOOK_VEC1
#undef ATTNBOOK_VEC2
#undef ATTNBOOK_VEC3
#undef ATTNBOOK_VEC4
struct float3 { float x, y, z; };
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
struct int3 { int x, y, z; };
inline int3 make_int3(int x, int y, int z) { return {x, y, z}; }

// ---- half and bfloat16: storage is the IEEE bit pattern; arithmetic rounds to nearest
// even --------------------------------------------------------------------------------
struct __half {
  unsigned short __x;
  __half() = default;
  __half(float f) : __x(c10::detail::fp16_ieee_from_fp32_value(f)) {}
  __half(double f) : __half(float(f)) {}
  __half(int i) : __half(float(i)) {}
  operator float() const { return c10::detail::fp16_ieee_to_fp32_value(__x); }
};
struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(c10::detail::round_to_nearest_even(f)) {}
  __nv_bfloat16(double f) : __nv_bfloat16(float(f)) {}
  __nv_bfloat16(int i) : __nv_bfloat16(float(i)) {}
  operator float() const { return c10::detail::f32_from_bits(__x); }
};
struct __align__(4) __half2 { __half x, y; };
struct __align__(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __half2 __float2half2_rn(float f) { return {__half(f), __half(f)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __half2 __float22half2_rn(float2 f) { return {__half(f.x), __half(f.y)}; }
inline float2 __half22float2(__half2 h) { return {float(h.x), float(h.y)}; }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 make_half2(__half a, __half b) { return {a, b}; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline float __low2float(__half2 h) { return float(h.x); }
inline float __high2float(__half2 h) { return float(h.y); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
inline short __half_as_short(__half h) { return short(h.__x); }

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __nv_bfloat162 __float2bfloat162_rn(float f) {
  return {__nv_bfloat16(f), __nv_bfloat16(f)};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return {__nv_bfloat16(a), __nv_bfloat16(b)};
}
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) {
  return {__nv_bfloat16(f.x), __nv_bfloat16(f.y)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {float(h.x), float(h.y)}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) {
  return {a, b};
}
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 h;
  h.__x = u;
  return h;
}

// Scalar and paired arithmetic for both 16-bit types: compute in float, round once.
#define ATTNBOOK_HALF_OPS(H, H2)                                                       \
  inline H __hadd(H a, H b) { return H(float(a) + float(b)); }                         \
  inline H __hsub(H a, H b) { return H(float(a) - float(b)); }                         \
  inline H __hmul(H a, H b) { return H(float(a) * float(b)); }                         \
  inline H __hdiv(H a, H b) { return H(float(a) / float(b)); }                         \
  inline H __hfma(H a, H b, H c) { return H(fmaf(float(a), float(b), float(c))); }     \
  inline H __hneg(H a) { H r = a; r.__x ^= 0x8000; return r; }                         \
  inline H __habs(H a) { H r = a; r.__x &= 0x7fff; return r; }                         \
  inline H __hmax(H a, H b) { return H(fmaxf(float(a), float(b))); }                   \
  inline H __hmin(H a, H b) { return H(fminf(float(a), float(b))); }                   \
  inline bool __heq(H a, H b) { return float(a) == float(b); }                         \
  inline bool __hne(H a, H b) { return float(a) != float(b); }                         \
  inline bool __hlt(H a, H b) { return float(a) < float(b); }                          \
  inline bool __hle(H a, H b) { return float(a) <= float(b); }                         \
  inline bool __hgt(H a, H b) { return float(a) > float(b); }                          \
  inline bool __hge(H a, H b) { return float(a) >= float(b); }                         \
  inline bool __hisnan(H a) { return float(a) != float(a); }                           \
  inline int __hisinf(H a) {                                                           \
    float f = a;                                                                       \
    return std::isinf(f) ? (f > 0 ? 1 : -1) : 0;                                       \
  }                                                                                    \
  inline H hexp(H a) { return H(expf(float(a))); }                                     \
  inline H hexp2(H a) { return H(exp2f(float(a))); }                                   \
  inline H hlog(H a) { return H(logf(float(a))); }                                     \
  inline H hsqrt(H a) { return H(sqrtf(float(a))); }                                   \
  inline H hrsqrt(H a) { return H(1.f / sqrtf(float(a))); }                            \
  inline H operator+(H a, H b) { return __hadd(a, b); }                                \
  inline H operator-(H a, H b) { return __hsub(a, b); }                                \
  inline H operator*(H a, H b) { return __hmul(a, b); }                                \
  inline H operator/(H a, H b) { return __hdiv(a, b); }                                \
  inline H operator-(H a) { return __hneg(a); }                                        \
  inline H& operator+=(H& a, H b) { return a = __hadd(a, b); }                         \
  inline H& operator-=(H& a, H b) { return a = __hsub(a, b); }                         \
  inline H& operator*=(H& a, H b) { return a = __hmul(a, b); }                         \
  inline H& operator/=(H& a, H b) { return a = __hdiv(a, b); }                         \
  inline H2 __hadd2(H2 a, H2 b) { return {__hadd(a.x, b.x), __hadd(a.y, b.y)}; }       \
  inline H2 __hsub2(H2 a, H2 b) { return {__hsub(a.x, b.x), __hsub(a.y, b.y)}; }       \
  inline H2 __hmul2(H2 a, H2 b) { return {__hmul(a.x, b.x), __hmul(a.y, b.y)}; }       \
  inline H2 __h2div(H2 a, H2 b) { return {__hdiv(a.x, b.x), __hdiv(a.y, b.y)}; }       \
  inline H2 __hfma2(H2 a, H2 b, H2 c) {                                                \
    return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};                             \
  }                                                                                    \
  inline H2 __hmax2(H2 a, H2 b) { return {__hmax(a.x, b.x), __hmax(a.y, b.y)}; }       \
  inline H2 __hmin2(H2 a, H2 b) { return {__hmin(a.x, b.x), __hmin(a.y, b.y)}; }       \
  inline H2 __hneg2(H2 a) { return {__hneg(a.x), __hneg(a.y)}; }                       \
  inline H2 h2exp(H2 a) { return {hexp(a.x), hexp(a.y)}; }                             \
  inline H2 operator+(H2 a, H2 b) { return __hadd2(a, b); }                            \
  inline H2 operator-(H2 a, H2 b) { return __hsub2(a, b); }                            \
  inline H2 operator*(H2 a, H2 b) { return __hmul2(a, b); }
ATTNBOOK_HALF_OPS(__half, __half2)
ATTNBOOK_HALF_OPS(__nv_bfloat16, __nv_bfloat162)
#undef ATTNBOOK_HALF_OPS
inline __half2 atomicAdd(__half2* p, __half2 v) {
  return ::attnbook_emu::atomic_update(p, [v](__half2 o) { return __hadd2(o, v); });
}

// ---- host-side runtime API ----------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
};
// Kernel launch errors throw (with the kernel's name) instead of being parked here.
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error"
       : e == cudaErrorInvalidValue ? "invalid argument" : "out of memory";
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
template <class F>
inline cudaError_t cudaFuncSetAttribute(F* fn, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || size_t(value) > ::attnbook_emu::kMaxDynamicSmem)
    return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(::attnbook_emu::host().m);
  auto& grants = ::attnbook_emu::host().smem_optin;
  for (auto& g : grants)
    if (g.first == reinterpret_cast<const void*>(fn)) {
      g.second = value;
      return cudaSuccess;
    }
  grants.emplace_back(reinterpret_cast<const void*>(fn), value);
  return cudaSuccess;
}
// As a GPU's, a buffer starts on 256 bytes; a kilobyte past its end belongs to no
// buffer, so that memcheck names an overrun into it (packed buffers would hide it in
// the next one) and the default build's overrun corrupts nothing.
inline cudaError_t cudaMalloc(void** p, size_t n) {
  constexpr size_t kAlign = 256, kRedZone = 1024;
  *p = std::aligned_alloc(kAlign, (n + kRedZone + kAlign - 1) / kAlign * kAlign);
  if (!*p) return cudaErrorMemoryAllocation;
  ::attnbook_emu::note_allocation(*p, n, true);   // kernels may touch it (if checked)
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMalloc(T** p, size_t n) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
inline cudaError_t cudaFree(void* p) {
  ::attnbook_emu::note_allocation(p, 0);
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind,
                                   cudaStream_t = nullptr) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* d, int v, size_t n) {
  std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t = nullptr) {
  std::memset(d, v, n);
  return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t n,
                                      size_t offset = 0,
                                      cudaMemcpyKind = cudaMemcpyHostToDevice) {
  std::memcpy(reinterpret_cast<char*>(&symbol) + offset, src, n);
  return cudaSuccess;
}

// ---- tensor cores: warp-wide matrix instructions, computed from the PTX ISA's
// fragments ---------------------------------------------------------------------------
namespace attnbook_emu {

// The 16-bit element `i` (0 or 1) of a packed register: element 0 sits in the low half.
inline uint16_t half_of(uint32_t reg, int i) { return uint16_t(reg >> (16 * i)); }
inline uint32_t pack(uint16_t lo, uint16_t hi) {
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

template <class T> inline float to_float(uint16_t bits) {
  T t;
  t.__x = bits;
  return float(t);
}
// Both elements of a packed register, element 0 first (one F16C instruction for a pair
// of halves where the host has it: the same values)
template <class T> inline void to_float2(uint32_t reg, float* out) {
#ifdef __F16C__
  if constexpr (std::is_same_v<T, __half>) {
    float four[4];
    _mm_storeu_ps(four, _mm_cvtph_ps(_mm_cvtsi32_si128(int(reg))));
    std::memcpy(out, four, 2 * sizeof(float));
    return;
  }
#endif
  out[0] = to_float<T>(half_of(reg, 0));
  out[1] = to_float<T>(half_of(reg, 1));
}

// mma.sync.aligned.m16n8k{K}.row.col.f32.{T}.{T}.f32: D(16x8) = A(16xK) B(Kx8) + C.
// groupID g = lane / 4, t = lane % 4. A: register r holds row g + 8*(r%2), columns
// 2t + 8*(r/2) + {0,1}. B: register r holds column g, rows 2t + 8r + {0,1}. C and D:
// element i holds row g + 8*(i/2), column 2t + i%2.
template <class T, int K>
struct MmaLane { const uint32_t* a; const uint32_t* b; const float* c; float* d; };

template <class T, int K>
void mma_all(void* const* data, uint32_t) {
  float A[16][K], B[K][8], D[16][8];
  for (int lane = 0; lane < kWarp; ++lane) {
    auto* m = static_cast<MmaLane<T, K>*>(data[lane]);
    int g = lane / 4, t = lane % 4;
    for (int r = 0; r < K / 4; ++r)
      to_float2<T>(m->a[r], &A[g + 8 * (r % 2)][2 * t + 8 * (r / 2)]);
    for (int r = 0; r < K / 8; ++r) {
      float pair[2];
      to_float2<T>(m->b[r], pair);
      B[2 * t + 8 * r][g] = pair[0];
      B[2 * t + 8 * r + 1][g] = pair[1];
    }
    for (int i = 0; i < 2; ++i) std::memcpy(&D[g + 8 * i][2 * t], m->c + 2 * i, 8);
  }
  // Each D[row][col] adds its K products in k's order. A row of D is one vector of
  // eight floats and four rows advance together: independent sums the host runs side
  // by side, each in the same order as one at a time.
  typedef float Row __attribute__((vector_size(32)));
  for (int row = 0; row < 16; row += 4) {
    Row d0, d1, d2, d3, b;
    std::memcpy(&d0, D[row], sizeof b);
    std::memcpy(&d1, D[row + 1], sizeof b);
    std::memcpy(&d2, D[row + 2], sizeof b);
    std::memcpy(&d3, D[row + 3], sizeof b);
    for (int k = 0; k < K; ++k) {
      std::memcpy(&b, B[k], sizeof b);
      d0 += A[row][k] * b;
      d1 += A[row + 1][k] * b;
      d2 += A[row + 2][k] * b;
      d3 += A[row + 3][k] * b;
    }
    std::memcpy(D[row], &d0, sizeof b);
    std::memcpy(D[row + 1], &d1, sizeof b);
    std::memcpy(D[row + 2], &d2, sizeof b);
    std::memcpy(D[row + 3], &d3, sizeof b);
  }
  for (int lane = 0; lane < kWarp; ++lane) {
    auto* m = static_cast<MmaLane<T, K>*>(data[lane]);
    int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 2; ++i) std::memcpy(m->d + 2 * i, &D[g + 8 * i][2 * t], 8);
  }
}

template <class T, int K>
inline void mma(int line, float* d, const uint32_t* a, const uint32_t* b,
                const float* c) {
  float out[4];
  MmaLane<T, K> lane{a, b, c, out};
  warp_collective(0xffffffffu, line, &lane, &mma_all<T, K>);
  std::memcpy(d, out, sizeof out);
}

// mma.sync.aligned.m16n8k{K}.row.col{.satfinite}.s32.{s8,u8}.{s8,u8}.s32, K 16 or 32:
// the byte-wide fragments of the PTX ISA. A: register r holds row g + 8*(r%2), columns
// 4t + 16*(r/2) + {0..3}; B: register r holds column g, rows 4t + 16r + {0..3}; C and
// D as in the f32 form. Products are summed exactly (in 64 bits); without .satfinite
// the sum wraps to 32 bits, with it it is clamped to int32's range.
template <bool SignedA, bool SignedB, int K, bool Sat>
struct MmaIntLane {
  const uint32_t* a;
  const uint32_t* b;
  const int32_t* c;
  int32_t* d;
};

template <bool Signed> inline int64_t byte_of(uint32_t reg, int i) {
  const uint32_t v = (reg >> (8 * i)) & 0xff;
  return Signed ? int64_t(int8_t(v)) : int64_t(v);
}

template <bool SignedA, bool SignedB, int K, bool Sat>
void mma_int_all(void* const* data, uint32_t) {
  int64_t A[16][K], B[K][8], D[16][8];
  for (int lane = 0; lane < kWarp; ++lane) {
    auto* m = static_cast<MmaIntLane<SignedA, SignedB, K, Sat>*>(data[lane]);
    int g = lane / 4, t = lane % 4;
    for (int r = 0; r < K / 8; ++r)
      for (int i = 0; i < 4; ++i)
        A[g + 8 * (r % 2)][4 * t + 16 * (r / 2) + i] = byte_of<SignedA>(m->a[r], i);
    for (int r = 0; r < K / 16; ++r)
      for (int i = 0; i < 4; ++i)
        B[4 * t + 16 * r + i][g] = byte_of<SignedB>(m->b[r], i);
    for (int i = 0; i < 4; ++i) D[g + 8 * (i / 2)][2 * t + i % 2] = m->c[i];
  }
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 8; ++col) {
      int64_t acc = D[row][col];
      for (int k = 0; k < K; ++k) acc += A[row][k] * B[k][col];
      D[row][col] = Sat ? std::clamp<int64_t>(acc, INT32_MIN, INT32_MAX)
                        : int64_t(int32_t(uint32_t(uint64_t(acc))));
    }
  for (int lane = 0; lane < kWarp; ++lane) {
    auto* m = static_cast<MmaIntLane<SignedA, SignedB, K, Sat>*>(data[lane]);
    int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) m->d[i] = int32_t(D[g + 8 * (i / 2)][2 * t + i % 2]);
  }
}

template <bool SignedA, bool SignedB, int K, bool Sat>
inline void mma_int(int line, int32_t* d, const uint32_t* a, const uint32_t* b,
                    const int32_t* c) {
  int32_t out[4];
  MmaIntLane<SignedA, SignedB, K, Sat> lane{a, b, c, out};
  warp_collective(0xffffffffu, line, &lane, &mma_int_all<SignedA, SignedB, K, Sat>);
  std::memcpy(d, out, sizeof out);
}

// ldmatrix.sync.aligned.m8n8.x{N}[.trans].shared.b16: lanes 8m..8m+7 give the row
// addresses of matrix m; lane l receives, in register m, row l/4, columns 2(l%4) and
// 2(l%4)+1 of matrix m (with .trans: column l/4, rows 2(l%4) and 2(l%4)+1).
struct LdmatrixLane { const uint16_t* row; uint32_t* out; };

template <int N, bool Trans>
void ldmatrix_all(void* const* data, uint32_t) {
  for (int lane = 0; lane < kWarp; ++lane) {
    auto* dst = static_cast<LdmatrixLane*>(data[lane]);
    for (int m = 0; m < N; ++m) {
      int r = lane / 4, c = 2 * (lane % 4);
      uint16_t e[2];
      for (int i = 0; i < 2; ++i)
        e[i] = Trans ? static_cast<LdmatrixLane*>(data[8 * m + c + i])->row[r]
                     : static_cast<LdmatrixLane*>(data[8 * m + r])->row[c + i];
      dst->out[m] = pack(e[0], e[1]);
    }
  }
}

template <int N, bool Trans>
inline void ldmatrix(int line, uint32_t* regs, const void* row) {
  // The collective reads every lane's row; the checked build sees each read here, as
  // the lane's own: lanes 0..8N-1 give a row of 8 16-bit elements each.
  if (rt().cur->linear % kWarp < 8 * N) note_access(row, 16, false);
  uint32_t out[N];
  LdmatrixLane lane{static_cast<const uint16_t*>(row), out};
  warp_collective(0xffffffffu, line, &lane, &ldmatrix_all<N, Trans>);
  std::memcpy(regs, out, sizeof out);
}

}  // namespace attnbook_emu
