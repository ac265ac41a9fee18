#pragma once
// Block layouts of the GGML quantized formats (byte-exact with GGUF files).
// Values: Q4_0 x = d*(q-8); Q4_1 x = d*q + m; Q5_0 x = d*(q-16); Q5_1 x = d*q + m;
// Q8_0 x = d*q. K-quants use super-blocks of 256 with 6-bit (Q4_K/Q5_K) or 8-bit (Q6_K)
// sub-block scales. Q8_K is the activation format for k-quant dot products.
#include <cstdint>

namespace ember::quant {

constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK5_1 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK8_1 = 32;
constexpr int kQK_K = 256;
constexpr int kKScaleSize = 12;

using f16_t = uint16_t;  // IEEE half bits

struct BlockQ4_0 {
  f16_t d;
  uint8_t qs[kQK4_0 / 2];  // element j in low nibble of qs[j], element j+16 in the high nibble
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_1 {
  f16_t d;
  f16_t m;
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  f16_t d;
  uint8_t qh[4];  // 5th bits, bit j for element j
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  f16_t d;
  f16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockQ8_0 {
  f16_t d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ8_1 {
  f16_t d;
  f16_t s;  // d * sum(qs)
  int8_t qs[kQK8_1];
};
static_assert(sizeof(BlockQ8_1) == 36);

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // low 4 bits scale, high 4 bits min
  uint8_t qs[kQK_K / 4];
  f16_t d;
  f16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  f16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

struct BlockQ4_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[kKScaleSize];  // 8 sub-blocks of 32: 6-bit scales and 6-bit mins
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  f16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sums of groups of 16
};
static_assert(sizeof(BlockQ8_K) == 292);

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block from
// its 12 packed bytes: sub-blocks 0-3 live in the low 6 bits of bytes 0-3 (scales) and 4-7
// (mins); sub-blocks 4-7 take their low 4 bits from bytes 8-11 and their top 2 bits from
// the spare high bits of bytes 0-7.
inline void kquant_scale_min(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K: the signed 6-bit scale (-32..31) of sub-block j (0..15) from its 12 packed bytes:
// low 4 bits from the nibbles of bytes 0-7, high 2 bits from bytes 8-11.
inline int q3k_scale(int j, const uint8_t* s) {
  const int low = j < 8 ? (s[j] & 0xf) : (s[j - 8] >> 4);
  const int high = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace ember::quant
