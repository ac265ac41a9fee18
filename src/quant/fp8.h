#pragma once
// FP8 scalar conversions (OCP 8-bit floating point):
//   E4M3 ("fn"): bias 7, no infinities, 0x7f/0xff are NaN, largest finite 448.
//   E5M2: bias 15, IEEE-like (the top byte of an IEEE half), largest finite 57344.
// Encoding rounds to nearest, ties to even, as PyTorch's casts do: E4M3 saturates
// out-of-range values and infinities to +-448 (it has no infinity); E5M2 overflows to +-inf
// like an IEEE format.
#include "core/half.h"

#include <cmath>
#include <cstdint>

namespace ember::quant {

inline float fp8_e4m3_to_f32(uint8_t b) {
  const float sign = (b & 0x80u) ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);  // subnormal: m/8 * 2^-6
  return sign * std::ldexp(static_cast<float>(8 + mant), exp - 10);      // (1 + m/8) * 2^(e-7)
}

inline float fp8_e5m2_to_f32(uint8_t b) { return f16_to_f32(static_cast<uint16_t>(b << 8)); }

namespace detail {
// Rounds v (>= 0, < 2^23) to the nearest integer, ties to even, without the FP environment.
inline float round_half_even(float v) {
  const float r = std::floor(v);
  const float frac = v - r;
  if (frac > 0.5f || (frac == 0.5f && std::fmod(r, 2.0f) != 0.0f)) return r + 1.0f;
  return r;
}

// Magnitude bits (no sign) of a minifloat with mant_bits mantissa bits and exponent bias
// `bias` for a >= 0; a >= limit gives limit_bits. Exact: scaling by powers of two is exact
// in float.
inline uint32_t encode_minifloat(float a, int mant_bits, int bias, float limit,
                                 uint32_t limit_bits) {
  if (!(a < limit)) return limit_bits;  // also +inf
  if (a == 0.0f) return 0;
  const int min_normal_exp = 1 - bias;
  const int one = 1 << mant_bits;
  int e = 0;
  std::frexp(a, &e);
  e -= 1;  // a = 1.m * 2^e
  if (e < min_normal_exp) {
    // Subnormal: units of 2^(min_normal_exp - mant_bits); a result of `one` is the smallest
    // normal, whose bit pattern is exactly `one`.
    return static_cast<uint32_t>(round_half_even(std::ldexp(a, mant_bits - min_normal_exp)));
  }
  float m = round_half_even(std::ldexp(a, mant_bits - e));  // in [one, 2*one]
  if (m >= 2.0f * one) {
    m = static_cast<float>(one);
    ++e;
  }
  const uint32_t bits = (static_cast<uint32_t>(e + bias) << mant_bits) |
                        (static_cast<uint32_t>(m) - static_cast<uint32_t>(one));
  return bits;
}
}  // namespace detail

inline uint8_t f32_to_fp8_e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | 0x7f);
  return static_cast<uint8_t>(sign | detail::encode_minifloat(std::fabs(f), 3, 7, 448.0f, 0x7e));
}

inline uint8_t f32_to_fp8_e5m2(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | 0x7f);
  // 61440 is the midpoint between 57344 and 65536 (inf); ties to even round it up to inf.
  return static_cast<uint8_t>(sign |
                              detail::encode_minifloat(std::fabs(f), 2, 15, 61440.0f, 0x7c));
}

}  // namespace ember::quant
