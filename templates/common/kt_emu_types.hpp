// Host emulation of CUDA's value types: dim3/uint3, the vector types
// (float2, float4, int4, ...) with CUDA's alignments, and __nv_bfloat16 /
// __half with round-to-nearest-even conversions from float. Part of the
// emulation header set (see kt_emu.hpp); never part of GPU source text.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/kt_emu_abi.hpp"

// ---- index types -----------------------------------------------------------

using uint3 = ::kt::emu::U3;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(::kt::emu::U3 u) : x(u.x), y(u.y), z(u.z) {}
  constexpr operator ::kt::emu::U3() const { return {x, y, z}; }
};

// ---- vector types (alignment as in CUDA's vector_types.h) -----------------

#define KT_EMU_VEC2(name, T, align)                                               \
  struct alignas(align) name {                                                    \
    T x, y;                                                                       \
  };                                                                              \
  inline name make_##name(T x, T y) { return name{x, y}; }
#define KT_EMU_VEC3(name, T)                                                      \
  struct name {                                                                   \
    T x, y, z;                                                                    \
  };                                                                              \
  inline name make_##name(T x, T y, T z) { return name{x, y, z}; }
#define KT_EMU_VEC4(name, T, align)                                               \
  struct alignas(align) name {                                                    \
    T x, y, z, w;                                                                 \
  };                                                                              \
  inline name make_##name(T x, T y, T z, T w) { return name{x, y, z, w}; }

KT_EMU_VEC2(char2, signed char, 2)
KT_EMU_VEC4(char4, signed char, 4)
KT_EMU_VEC2(uchar2, unsigned char, 2)
KT_EMU_VEC4(uchar4, unsigned char, 4)
KT_EMU_VEC2(short2, short, 4)
KT_EMU_VEC4(short4, short, 8)
KT_EMU_VEC2(ushort2, unsigned short, 4)
KT_EMU_VEC4(ushort4, unsigned short, 8)
KT_EMU_VEC2(int2, int, 8)
KT_EMU_VEC3(int3, int)
KT_EMU_VEC4(int4, int, 16)
KT_EMU_VEC2(uint2, unsigned, 8)
KT_EMU_VEC4(uint4, unsigned, 16)
KT_EMU_VEC2(float2, float, 8)
KT_EMU_VEC3(float3, float)
KT_EMU_VEC4(float4, float, 16)
KT_EMU_VEC2(double2, double, 16)
KT_EMU_VEC2(longlong2, long long, 16)
KT_EMU_VEC2(ulonglong2, unsigned long long, 16)
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
#undef KT_EMU_VEC2
#undef KT_EMU_VEC3
#undef KT_EMU_VEC4

// ---- bit-exact conversions ------------------------------------------------

namespace kt::emu {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// fp32 -> bf16, round to nearest even; NaN stays a quiet NaN.
inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_to_float(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

/// fp32 -> IEEE fp16, round to nearest even, with subnormals, overflow to inf.
inline std::uint16_t float_to_half(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  const std::uint32_t e = a >> 23;
  if (e < 113) {  // below 2^-14: a subnormal half (or zero)
    if (e < 102) return static_cast<std::uint16_t>(sign);
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - e;  // 14..24
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = ((e - 112) << 10) | ((a & 0x7fffffu) >> 13);
  const std::uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
}

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return bits_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    const float v = static_cast<float>(m) * (1.0f / 16777216.0f);  // m * 2^-24, exact
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

/// A double rounded to nearest even, once, to a 16-bit float of `mantissa` bits, smallest normal exponent
/// `min_exponent` and largest `max_exponent`, returned as a double (which holds it exactly); NaN and infinities
/// stay, values from the largest finite plus half an ulp up become infinite.
inline double round_double(double x, int mantissa, int min_exponent, int max_exponent) {
  if (x != x || x == 0.0) return x;
  const double a = std::fabs(x);
  if (a >= std::ldexp(2.0 - std::ldexp(1.0, -mantissa - 1), max_exponent)) return std::copysign(HUGE_VAL, x);
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int quantum = (e - 1 < min_exponent ? min_exponent : e - 1) - mantissa;  // the ulp at a (subnormals: fixed)
  const double r = std::nearbyint(std::ldexp(a, -quantum));                      // to nearest even, exactly
  return std::copysign(std::ldexp(r, quantum), x);
}
/// double -> bf16 and IEEE fp16, rounded once (not through float, which would round twice).
inline std::uint16_t double_to_bf16(double d) {
  return float_to_bf16(static_cast<float>(round_double(d, 7, -126, 127)));
}
inline std::uint16_t double_to_half(double d) {
  return float_to_half(static_cast<float>(round_double(d, 10, -14, 15)));
}

/// a * b + c rounded to odd in double (the nearest double below or above the exact value, the one with an odd
/// last bit, where it is not exact): rounded once more to a type of at most 51 bits it gives the correctly
/// rounded fused multiply-add. a * b is exact in double for float operands of up to 26 bits (half, bf16).
inline double fma_round_to_odd(float a, float b, float c) {
  const double p = static_cast<double>(a) * static_cast<double>(b), q = static_cast<double>(c);
  const double s = p + q;
  if (!std::isfinite(s)) return s;
  const double bb = s - p, err = (p - (s - bb)) + (q - bb);  // s + err == p + q exactly (TwoSum)
  if (err == 0.0) return s;
  std::uint64_t bits;
  std::memcpy(&bits, &s, 8);
  return bits & 1u ? s : std::nextafter(s, err > 0.0 ? HUGE_VAL : -HUGE_VAL);
}

}  // namespace kt::emu

// ---- __nv_bfloat16 / __half -------------------------------------------------
// Conversions and arithmetic as CUDA defines them for sm_80: implicit
// conversions to and from float, and operators that round their float
// result back to the 16-bit type.

#define KT_EMU_HALF_TYPE(T, to_bits, double_to_bits, to_f)                                        \
  struct T {                                                                                      \
    unsigned short __x;                                                                           \
    T() = default;                                                                                \
    T(float f) : __x(::kt::emu::to_bits(f)) {}                                                    \
    T(double f) : __x(::kt::emu::double_to_bits(f)) {}                                            \
    T(int i) : __x(::kt::emu::double_to_bits(static_cast<double>(i))) {}                          \
    operator float() const { return ::kt::emu::to_f(__x); }                                       \
    T& operator+=(T o) { return *this = T(float(*this) + float(o)); }                             \
    T& operator-=(T o) { return *this = T(float(*this) - float(o)); }                             \
    T& operator*=(T o) { return *this = T(float(*this) * float(o)); }                             \
    T& operator/=(T o) { return *this = T(float(*this) / float(o)); }                             \
  };                                                                                              \
  inline T operator+(T a, T b) { return T(float(a) + float(b)); }                                 \
  inline T operator-(T a, T b) { return T(float(a) - float(b)); }                                 \
  inline T operator*(T a, T b) { return T(float(a) * float(b)); }                                 \
  inline T operator/(T a, T b) { return T(float(a) / float(b)); }                                 \
  inline T operator-(T a) {                                                                       \
    T r;                                                                                          \
    r.__x = static_cast<unsigned short>(a.__x ^ 0x8000u);                                         \
    return r;                                                                                     \
  }                                                                                               \
  inline bool operator==(T a, T b) { return float(a) == float(b); }                               \
  inline bool operator!=(T a, T b) { return float(a) != float(b); }                               \
  inline bool operator<(T a, T b) { return float(a) < float(b); }                                 \
  inline bool operator>(T a, T b) { return float(a) > float(b); }                                 \
  inline bool operator<=(T a, T b) { return float(a) <= float(b); }                               \
  inline bool operator>=(T a, T b) { return float(a) >= float(b); }

KT_EMU_HALF_TYPE(__nv_bfloat16, float_to_bf16, double_to_bf16, bf16_to_float)
KT_EMU_HALF_TYPE(__half, float_to_half, double_to_half, half_to_float)
#undef KT_EMU_HALF_TYPE

struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
struct alignas(4) __half2 {
  __half x, y;
};
using half = __half;
using half2 = __half2;
using nv_bfloat16 = __nv_bfloat16;
using nv_bfloat162 = __nv_bfloat162;

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return {__nv_bfloat16(f.x), __nv_bfloat16(f.y)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {float(h.x), float(h.y)}; }
inline float __low2float(__nv_bfloat162 h) { return float(h.x); }
inline float __high2float(__nv_bfloat162 h) { return float(h.y); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 h;
  h.__x = u;
  return h;
}

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __double2half(double d) { return __half(d); }
inline float __half2float(__half h) { return float(h); }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __half2 __float22half2_rn(float2 f) { return {__half(f.x), __half(f.y)}; }
inline float2 __half22float2(__half2 h) { return {float(h.x), float(h.y)}; }
inline float __low2float(__half2 h) { return float(h.x); }
inline float __high2float(__half2 h) { return float(h.y); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) {
  __half h;
  h.__x = u;
  return h;
}

namespace kt::emu {
/// CUDART_NAN_FP16 / CUDART_NAN_BF16: the bits 0x7fff.
template <class T>
inline T canonical_nan() {
  T r;
  r.__x = 0x7fff;
  return r;
}
}  // namespace kt::emu

// cuda_fp16.h's and cuda_bf16.h's arithmetic, in float and rounded to the type (a product of two is exact in
// float), so `__hadd(a, b)` of two halves is no integer halving add; __hfma rounds once, as fma.rn does; the *2
// forms lane by lane. __hmax and __hmin return the other input where one is NaN (canonical NaN 0x7fff where both
// are) and order -0 below +0; the _nan forms give canonical NaN where either is NaN.
#define KT_EMU_HALF_MATH(T, T2)                                                                                        \
  inline bool __hisnan(T a) { return float(a) != float(a); }                                                           \
  inline int __hisinf(T a) { return std::isinf(float(a)) ? (float(a) < 0 ? -1 : 1) : 0; }                              \
  inline T __hadd(T a, T b) { return T(float(a) + float(b)); }                                                         \
  inline T __hsub(T a, T b) { return T(float(a) - float(b)); }                                                         \
  inline T __hmul(T a, T b) { return T(float(a) * float(b)); }                                                         \
  inline T __hdiv(T a, T b) { return T(float(a) / float(b)); }                                                         \
  inline T __hfma(T a, T b, T c) { return T(::kt::emu::fma_round_to_odd(float(a), float(b), float(c))); }              \
  inline T __hneg(T a) { return T(-float(a)); }                                                                        \
  inline T __habs(T a) { return T(float(a) < 0 ? -float(a) : float(a)); }                                              \
  inline T __hmax(T a, T b) {                                                                                          \
    if (__hisnan(a) && __hisnan(b)) return ::kt::emu::canonical_nan<T>();                                              \
    if (__hisnan(a) || __hisnan(b)) return __hisnan(a) ? b : a;                                                        \
    if (float(a) == float(b)) return a.__x > b.__x ? b : a; /* +0 over -0 */                                           \
    return float(a) < float(b) ? b : a;                                                                                \
  }                                                                                                                    \
  inline T __hmin(T a, T b) {                                                                                          \
    if (__hisnan(a) && __hisnan(b)) return ::kt::emu::canonical_nan<T>();                                              \
    if (__hisnan(a) || __hisnan(b)) return __hisnan(a) ? b : a;                                                        \
    if (float(a) == float(b)) return a.__x > b.__x ? a : b; /* -0 under +0 */                                          \
    return float(b) < float(a) ? b : a;                                                                                \
  }                                                                                                                    \
  inline T __hmax_nan(T a, T b) {                                                                                      \
    return __hisnan(a) || __hisnan(b) ? ::kt::emu::canonical_nan<T>() : __hmax(a, b);                                  \
  }                                                                                                                    \
  inline T __hmin_nan(T a, T b) {                                                                                      \
    return __hisnan(a) || __hisnan(b) ? ::kt::emu::canonical_nan<T>() : __hmin(a, b);                                  \
  }                                                                                                                    \
  inline T2 __hadd2(T2 a, T2 b) { return {__hadd(a.x, b.x), __hadd(a.y, b.y)}; }                                       \
  inline T2 __hsub2(T2 a, T2 b) { return {__hsub(a.x, b.x), __hsub(a.y, b.y)}; }                                       \
  inline T2 __hmul2(T2 a, T2 b) { return {__hmul(a.x, b.x), __hmul(a.y, b.y)}; }                                       \
  inline T2 __hfma2(T2 a, T2 b, T2 c) { return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }                       \
  inline T2 __hmax2(T2 a, T2 b) { return {__hmax(a.x, b.x), __hmax(a.y, b.y)}; }                                       \
  inline T2 __hmin2(T2 a, T2 b) { return {__hmin(a.x, b.x), __hmin(a.y, b.y)}; }                                       \
  inline T2 __hmax2_nan(T2 a, T2 b) { return {__hmax_nan(a.x, b.x), __hmax_nan(a.y, b.y)}; }                           \
  inline T2 __hmin2_nan(T2 a, T2 b) { return {__hmin_nan(a.x, b.x), __hmin_nan(a.y, b.y)}; }
KT_EMU_HALF_MATH(__half, __half2)
KT_EMU_HALF_MATH(__nv_bfloat16, __nv_bfloat162)
#undef KT_EMU_HALF_MATH
