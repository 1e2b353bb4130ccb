// CUDA built-ins the book's kernels do not use but kernels from elsewhere do:
// cache-hint loads and stores, warp match and reduce, scoped atomics, funnel shifts,
// dot products, more half/bfloat16 functions and vector types. Part of cuda_emulator.h.
#pragma once

#include "emu_builtins.h"

// ---- loads and stores with cache hints: the emulator has no caches ------------------
#define ATTNBOOK_LOAD_HINT(NAME) \
  template <class T> inline T NAME(const T* p) { return *p; }
#define ATTNBOOK_STORE_HINT(NAME) \
  template <class T> inline void NAME(T* p, T v) { *p = v; }
ATTNBOOK_LOAD_HINT(__ldca)
ATTNBOOK_LOAD_HINT(__ldcg)
ATTNBOOK_LOAD_HINT(__ldcs)
ATTNBOOK_LOAD_HINT(__ldlu)
ATTNBOOK_LOAD_HINT(__ldcv)
ATTNBOOK_STORE_HINT(__stwb)
ATTNBOOK_STORE_HINT(__stcg)
ATTNBOOK_STORE_HINT(__stcs)
ATTNBOOK_STORE_HINT(__stwt)
#undef ATTNBOOK_LOAD_HINT
#undef ATTNBOOK_STORE_HINT

// ---- warp match and reduce (sm_70, sm_80) -------------------------------------------
namespace attnbook_emu {
struct WordLane { uint64_t value, result; };

// Each lane of the group gets Combine{}(data, group, its value).
template <class Combine>
inline uint64_t warp_words(int line, unsigned mask, uint64_t value) {
  WordLane d{value, 0};
  warp_collective(mask, line, &d, [](void* const* data, uint32_t group) {
    for (int l = 0; l < kWarp; ++l) {
      if (!(group & (1u << l))) continue;
      auto* me = static_cast<WordLane*>(data[l]);
      me->result = Combine{}(data, group, me->value);
    }
  });
  return d.result;
}

struct LanesEqual {
  uint64_t operator()(void* const* data, uint32_t group, uint64_t v) const {
    uint64_t bits = 0;
    for (int l = 0; l < kWarp; ++l)
      if ((group & (1u << l)) && static_cast<WordLane*>(data[l])->value == v)
        bits |= 1u << l;
    return bits;
  }
};

template <class T, class Op>
struct Reduce {
  uint64_t operator()(void* const* data, uint32_t group, uint64_t) const {
    bool first = true;
    T acc{};
    for (int l = 0; l < kWarp; ++l) {
      if (!(group & (1u << l))) continue;
      T x = T(static_cast<WordLane*>(data[l])->value);
      acc = first ? x : Op{}(acc, x);
      first = false;
    }
    return uint64_t(acc);
  }
};
struct OpAdd { template <class T> T operator()(T a, T b) const { return a + b; } };
struct OpMin {
  template <class T> T operator()(T a, T b) const { return b < a ? b : a; }
};
struct OpMax {
  template <class T> T operator()(T a, T b) const { return a < b ? b : a; }
};
struct OpAnd { template <class T> T operator()(T a, T b) const { return a & b; } };
struct OpOr { template <class T> T operator()(T a, T b) const { return a | b; } };
struct OpXor { template <class T> T operator()(T a, T b) const { return a ^ b; } };
}  // namespace attnbook_emu

template <class T>
inline unsigned __match_any_sync(unsigned mask, T value) {
  uint64_t v = 0;
  std::memcpy(&v, &value, sizeof(T));
  return unsigned(::attnbook_emu::warp_words<::attnbook_emu::LanesEqual>(__LINE__, mask,
                                                                       v));
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int* pred) {
  unsigned same = __match_any_sync(mask, value);
  unsigned group = mask & ::attnbook_emu::existing_lanes(
                              ::attnbook_emu::rt().cur->linear / 32);
  *pred = same == group;
  return *pred ? group : 0u;
}
#define ATTNBOOK_REDUCE(NAME, T, OP)                                                 \
  inline T NAME(unsigned mask, T v) {                                                \
    using R = ::attnbook_emu::Reduce<T, ::attnbook_emu::OP>;                         \
    return T(::attnbook_emu::warp_words<R>(__LINE__, mask, uint64_t(uint32_t(v))));  \
  }
#if ATTNBOOK_EMU_ARCH >= 800   // __reduce_*_sync are sm_80 instructions
ATTNBOOK_REDUCE(__reduce_add_sync, unsigned, OpAdd)
ATTNBOOK_REDUCE(__reduce_add_sync, int, OpAdd)
ATTNBOOK_REDUCE(__reduce_min_sync, unsigned, OpMin)
ATTNBOOK_REDUCE(__reduce_min_sync, int, OpMin)
ATTNBOOK_REDUCE(__reduce_max_sync, unsigned, OpMax)
ATTNBOOK_REDUCE(__reduce_max_sync, int, OpMax)
ATTNBOOK_REDUCE(__reduce_and_sync, unsigned, OpAnd)
ATTNBOOK_REDUCE(__reduce_or_sync, unsigned, OpOr)
ATTNBOOK_REDUCE(__reduce_xor_sync, unsigned, OpXor)
#endif
#undef ATTNBOOK_REDUCE

// ---- atomics scoped to the block or the system: every atomic here is system-wide ----
#define ATTNBOOK_SCOPED(OP)                                                       \
  template <class T, class... A> inline T OP##_block(T* p, A... a) {            \
    return OP(p, a...);                                                          \
  }                                                                              \
  template <class T, class... A> inline T OP##_system(T* p, A... a) {           \
    return OP(p, a...);                                                          \
  }
ATTNBOOK_SCOPED(atomicAdd)
ATTNBOOK_SCOPED(atomicSub)
ATTNBOOK_SCOPED(atomicExch)
ATTNBOOK_SCOPED(atomicMax)
ATTNBOOK_SCOPED(atomicMin)
ATTNBOOK_SCOPED(atomicAnd)
ATTNBOOK_SCOPED(atomicOr)
ATTNBOOK_SCOPED(atomicXor)
ATTNBOOK_SCOPED(atomicCAS)
ATTNBOOK_SCOPED(atomicInc)
ATTNBOOK_SCOPED(atomicDec)
#undef ATTNBOOK_SCOPED

// ---- integer intrinsics -------------------------------------------------------------
// Funnel shifts: the 64-bit hi:lo shifted, 32 bits kept; _l/_r wrap the amount mod 32,
// _lc/_rc clamp it to 32.
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  return unsigned(((uint64_t(hi) << 32 | lo) << (s & 31)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
  return unsigned(((uint64_t(hi) << 32 | lo) << (s < 32 ? s : 32)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  return unsigned((uint64_t(hi) << 32 | lo) >> (s & 31));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
  return unsigned((uint64_t(hi) << 32 | lo) >> (s < 32 ? s : 32));
}
// Four-way byte dot products accumulated in 32 bits.
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += int(int8_t(a >> 8 * i)) * int(int8_t(b >> 8 * i));
  return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
  for (int i = 0; i < 4; ++i) c += ((a >> 8 * i) & 0xff) * ((b >> 8 * i) & 0xff);
  return c;
}
inline int __sad(int a, int b, unsigned c) { return int(c) + (a > b ? a - b : b - a); }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) {
  return c + (a > b ? a - b : b - a);
}
inline int __hadd(int a, int b) { return int((int64_t(a) + b) >> 1); }
inline int __rhadd(int a, int b) { return int((int64_t(a) + b + 1) >> 1); }
inline long long __mul64hi(long long a, long long b) {
  return (long long)((__int128(a) * b) >> 64);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)((unsigned __int128)a * b >> 64);
}

// ---- more half and bfloat16 ---------------------------------------------------------
#define ATTNBOOK_HALF_MORE(H, H2, P)                                                  \
  inline H hrcp(H a) { return H(1.f / float(a)); }                                    \
  inline H hlog2(H a) { return H(log2f(float(a))); }                                  \
  inline H hlog10(H a) { return H(log10f(float(a))); }                                \
  inline H hexp10(H a) { return H(powf(10.f, float(a))); }                            \
  inline H hceil(H a) { return H(ceilf(float(a))); }                                  \
  inline H hfloor(H a) { return H(floorf(float(a))); }                                \
  inline H htrunc(H a) { return H(truncf(float(a))); }                                \
  inline H hrint(H a) { return H(nearbyintf(float(a))); }                             \
  inline H hsin(H a) { return H(sinf(float(a))); }                                    \
  inline H hcos(H a) { return H(cosf(float(a))); }                                    \
  inline H2 h2sqrt(H2 a) { return {hsqrt(a.x), hsqrt(a.y)}; }                         \
  inline H2 h2rsqrt(H2 a) { return {hrsqrt(a.x), hrsqrt(a.y)}; }                      \
  inline H2 h2rcp(H2 a) { return {hrcp(a.x), hrcp(a.y)}; }                            \
  inline H2 h2log(H2 a) { return {hlog(a.x), hlog(a.y)}; }                            \
  inline H2 h2log2(H2 a) { return {hlog2(a.x), hlog2(a.y)}; }                         \
  inline H2 h2exp2(H2 a) { return {hexp2(a.x), hexp2(a.y)}; }                         \
  inline H2 h2ceil(H2 a) { return {hceil(a.x), hceil(a.y)}; }                         \
  inline H2 h2floor(H2 a) { return {hfloor(a.x), hfloor(a.y)}; }                      \
  inline H2 __habs2(H2 a) { return {__habs(a.x), __habs(a.y)}; }                      \
  inline H2 __lows2##P##2(H2 a, H2 b) { return {a.x, b.x}; }                          \
  inline H2 __highs2##P##2(H2 a, H2 b) { return {a.y, b.y}; }                        \
  inline H2 __low2##P##2(H2 a) { return {a.x, a.x}; }                                 \
  inline H2 __high2##P##2(H2 a) { return {a.y, a.y}; }                                \
  inline H2 __lowhigh2highlow(H2 a) { return {a.y, a.x}; }                           \
  inline bool __hbeq2(H2 a, H2 b) { return __heq(a.x, b.x) && __heq(a.y, b.y); }    \
  inline H2 __heq2(H2 a, H2 b) { return {H(float(__heq(a.x, b.x))),                  \
                                         H(float(__heq(a.y, b.y)))}; }               \
  inline H2 __hgt2(H2 a, H2 b) { return {H(float(__hgt(a.x, b.x))),                  \
                                         H(float(__hgt(a.y, b.y)))}; }               \
  inline H2 __hlt2(H2 a, H2 b) { return {H(float(__hlt(a.x, b.x))),                  \
                                         H(float(__hlt(a.y, b.y)))}; }               \
  inline H2 operator/(H2 a, H2 b) { return __h2div(a, b); }                           \
  inline H2 operator-(H2 a) { return __hneg2(a); }                                    \
  inline H2& operator+=(H2& a, H2 b) { return a = __hadd2(a, b); }                    \
  inline H2& operator-=(H2& a, H2 b) { return a = __hsub2(a, b); }                    \
  inline H2& operator*=(H2& a, H2 b) { return a = __hmul2(a, b); }                    \
  inline H2& operator/=(H2& a, H2 b) { return a = __h2div(a, b); }                    \
  inline bool operator==(H a, H b) { return __heq(a, b); }                            \
  inline bool operator!=(H a, H b) { return __hne(a, b); }                            \
  inline bool operator<(H a, H b) { return __hlt(a, b); }                             \
  inline bool operator>(H a, H b) { return __hgt(a, b); }                             \
  inline bool operator<=(H a, H b) { return __hle(a, b); }                            \
  inline bool operator>=(H a, H b) { return __hge(a, b); }                            \
  inline H __int2##P##_rn(int i) { return H(float(i)); }                              \
  inline H __uint2##P##_rn(unsigned i) { return H(float(i)); }                        \
  inline H __short2##P##_rn(short i) { return H(float(i)); }                          \
  inline H __double2##P(double d) { return H(float(d)); }                             \
  inline int __##P##2int_rn(H h) { return int(nearbyintf(float(h))); }                \
  inline int __##P##2int_rz(H h) { return int(float(h)); }                            \
  inline unsigned __##P##2uint_rn(H h) { return unsigned(nearbyintf(float(h))); }     \
  inline unsigned __##P##2uint_rz(H h) { return unsigned(float(h)); }
ATTNBOOK_HALF_MORE(__half, __half2, half)
ATTNBOOK_HALF_MORE(__nv_bfloat16, __nv_bfloat162, bfloat16)
#undef ATTNBOOK_HALF_MORE
inline __half2 __half2half2(__half h) { return {h, h}; }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 h) { return {h, h}; }
inline __half2 __hmul2_rn(__half2 a, __half2 b) { return __hmul2(a, b); }
inline __half __float2half_rz(float f) {   // toward zero: nearest, stepped back if
                                           // past f
  __half h(f);
  if (std::fabs(float(h)) > std::fabs(f)) h.__x -= 1;
  return h;
}
inline __nv_bfloat16 __half2bfloat16(__half h) { return __nv_bfloat16(float(h)); }
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) {
  return {a, b};
}

inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return {x, y, z}; }
