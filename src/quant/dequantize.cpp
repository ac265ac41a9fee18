// Reference dequantization of every block format, element order as in GGML's
// dequantize_row_* (and the gguf Python package), arithmetic in float in the same order so
// results are bit-exact.
#include "quant/blocks.h"
#include "quant/dequantize_impl.h"
#include "quant/fp8.h"

#include "core/half.h"

#include <cstring>

namespace ember::quant::detail {

namespace {
template <typename Block>
const Block* blocks_of(const void* src) {
  return static_cast<const Block*>(src);
}
}  // namespace

void dequantize_q4_0(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ4_0>(src);
  for (int64_t i = 0; i < n / kQK4_0; ++i, y += kQK4_0) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>((b[i].qs[j] & 0xf) - 8) * d;
      y[j + kQK4_0 / 2] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ4_1>(src);
  for (int64_t i = 0; i < n / kQK4_1; ++i, y += kQK4_1) {
    const float d = f16_to_f32(b[i].d);
    const float m = f16_to_f32(b[i].m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[j] = static_cast<float>(b[i].qs[j] & 0xf) * d + m;
      y[j + kQK4_1 / 2] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ5_0>(src);
  for (int64_t i = 0; i < n / kQK5_0; ++i, y += kQK5_0) {
    const float d = f16_to_f32(b[i].d);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = static_cast<float>(((b[i].qs[j] & 0xf) | h0) - 16) * d;
      y[j + kQK5_0 / 2] = static_cast<float>(((b[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequantize_q5_1(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ5_1>(src);
  for (int64_t i = 0; i < n / kQK5_1; ++i, y += kQK5_1) {
    const float d = f16_to_f32(b[i].d);
    const float m = f16_to_f32(b[i].m);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = static_cast<float>((b[i].qs[j] & 0xf) | h0) * d + m;
      y[j + kQK5_1 / 2] = static_cast<float>((b[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}

void dequantize_q8_0(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ8_0>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, y += kQK8_0) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void dequantize_q8_1(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ8_1>(src);
  for (int64_t i = 0; i < n / kQK8_1; ++i, y += kQK8_1) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK8_1; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void dequantize_q2_k(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ2_K>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(b[i].d);
    const float dmin = f16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    int is = 0;
    // Two halves of 128; each 32-byte chunk holds four 2-bit planes of 32 elements, and
    // each plane is two sub-blocks of 16 with their own 4-bit scale and min.
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++is) {
          const float dl = d * static_cast<float>(b[i].scales[is] & 0xf);
          const float ml = dmin * static_cast<float>(b[i].scales[is] >> 4);
          for (int l = 0; l < 16; ++l) {
            *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
          }
        }
      }
    }
  }
}

void dequantize_q3_k(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ3_K>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(b[i].d);
    const uint8_t* q = b[i].qs;
    const uint8_t* hm = b[i].hmask;
    int is = 0;
    uint8_t m = 1;  // hmask bit of the current plane: set means "no -4 offset"
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 2; ++part, ++is) {
          const float dl = d * static_cast<float>(q3k_scale(is, b[i].scales));
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void dequantize_q4_k(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ4_K>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(b[i].d);
    const float dmin = f16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    // Each 32-byte chunk: 32 elements in the low nibbles, then 32 in the high nibbles.
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, mn;
      kquant_scale_min(j, b[i].scales, &sc, &mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      kquant_scale_min(j + 1, b[i].scales, &sc, &mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xf) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ5_K>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(b[i].d);
    const float dmin = f16_to_f32(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    uint8_t u1 = 1, u2 = 2;  // qh bit planes of the two sub-blocks of this chunk
    for (int j = 0; j < 8; j += 2, ql += 32) {
      uint8_t sc, mn;
      kquant_scale_min(j, b[i].scales, &sc, &mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      kquant_scale_min(j + 1, b[i].scales, &sc, &mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0xf) + ((qh[l] & u1) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      }
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequantize_q6_k(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ6_K>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    // Each half of 128: ql holds 64 bytes (two nibble planes), qh 32 bytes (four 2-bit planes).
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void dequantize_q8_k(const void* src, float* y, int64_t n) {
  const auto* b = blocks_of<BlockQ8_K>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    for (int j = 0; j < kQK_K; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
  }
}

}  // namespace ember::quant::detail
