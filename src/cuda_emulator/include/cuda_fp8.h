// cuda_fp8.h on the CPU emulator: the two 8-bit float formats, E4M3 (bias 7, no
// infinities, max 448) and E5M2 (bias 15), converted from float with round-to-nearest-
// even and saturation to the largest finite value (CUDA's __NV_SATFINITE), NaN kept.
#pragma once

#include <cmath>

#include "cuda_emulator.h"

typedef unsigned char __nv_fp8_storage_t;
enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };

namespace attnbook_emu {
template <int E, int M>
struct Fp8Format {
  static constexpr int bias = (1 << (E - 1)) - 1;
  static constexpr bool e4m3 = E == 4;
  static float max() { return e4m3 ? 448.f : 57344.f; }
  static float decode(unsigned char b) {
    int e = (b >> M) & ((1 << E) - 1), m = b & ((1 << M) - 1);
    float s = (b & 0x80) ? -1.f : 1.f;
    if (e4m3 && e == 15 && m == 7) return NAN;
    if (!e4m3 && e == 31) return m ? NAN : s * INFINITY;
    if (e == 0) return s * std::ldexp(float(m), 1 - bias - M);
    return s * std::ldexp(1.f + float(m) / (1 << M), e - bias);
  }
  static unsigned char encode(float f) {
    if (std::isnan(f)) return 0x7f;
    unsigned char sign = std::signbit(f) ? 0x80 : 0;
    float a = std::fmin(std::fabs(f), max());
    int exp = a < std::ldexp(1.f, 1 - bias) ? 1 - bias : std::ilogb(a);
    float q = std::nearbyint(std::ldexp(a, M - exp));   // ties to even
    a = std::fmin(std::ldexp(q, exp - M), max());
    if (a < std::ldexp(1.f, 1 - bias))
      return sign | (unsigned char)(std::ldexp(a, bias - 1 + M));
    exp = std::ilogb(a);
    int m = int(std::ldexp(a, M - exp)) - (1 << M);
    return sign | (unsigned char)((exp + bias) << M | m);
  }
};
}  // namespace attnbook_emu

#define ATTNBOOK_FP8(NAME, E, M)                                                    \
  struct NAME {                                                                     \
    using F = ::attnbook_emu::Fp8Format<E, M>;                                      \
    __nv_fp8_storage_t __x;                                                         \
    NAME() = default;                                                               \
    NAME(float f) : __x(F::encode(f)) {}                                            \
    NAME(double f) : NAME(float(f)) {}                                              \
    NAME(__half h) : NAME(float(h)) {}                                              \
    NAME(__nv_bfloat16 h) : NAME(float(h)) {}                                       \
    NAME(int i) : NAME(float(i)) {}                                                 \
    operator float() const { return F::decode(__x); }                               \
    operator __half() const { return __half(float(*this)); }                        \
    operator __nv_bfloat16() const { return __nv_bfloat16(float(*this)); }          \
  };
ATTNBOOK_FP8(__nv_fp8_e4m3, 4, 3)
ATTNBOOK_FP8(__nv_fp8_e5m2, 5, 2)
#undef ATTNBOOK_FP8

inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float f, __nv_saturation_t,
                                                __nv_fp8_interpretation_t kind) {
  return kind == __NV_E4M3 ? __nv_fp8_e4m3(f).__x : __nv_fp8_e5m2(f).__x;
}
