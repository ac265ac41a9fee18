// Activation quantizers (scalar): the same values as quant::quantize_row(Q8_0 / Q8_K), laid
// out for the integer kernels (see ActFormat in kernels.h), plus the per-block sums of the
// quantized values that let kernels fold weight offsets (q - 8, q - 32, mins) out of the
// inner loop.
#include "backend/cpu/kernels.h"
#include "core/half.h"

#include <cmath>
#include <cstring>

namespace ember::cpu {

size_t act_row_bytes(ActFormat f, int64_t k) {
  size_t bytes = 0;
  switch (f) {
    case ActFormat::F32: bytes = static_cast<size_t>(k) * 4; break;
    case ActFormat::Q8_32:
    case ActFormat::Q8_32P: bytes = static_cast<size_t>(k) + static_cast<size_t>(k / 32) * 8; break;
    case ActFormat::Q8_K:
      bytes = static_cast<size_t>(k) + static_cast<size_t>(k / 256) * 4 + static_cast<size_t>(k / 16) * 2;
      break;
  }
  return (bytes + 63) / 64 * 64;
}

void permute_q8_32_halves(uint8_t* row, int64_t k) {
  uint8_t tmp[128];
  for (int64_t c = 0; c + 128 <= k; c += 128) {
    uint8_t* q = row + c;
    for (int b = 0; b < 4; ++b) {
      std::memcpy(tmp + 16 * b, q + 32 * b, 16);
      std::memcpy(tmp + 64 + 16 * b, q + 32 * b + 16, 16);
    }
    std::memcpy(q, tmp, 128);
  }
}

namespace {

// GGML's nearest_int: round half to even for |v| < 2^22.
int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

void quantize_q8_32_scalar(const float* x, uint8_t* row, int64_t k) {
  auto* qs = reinterpret_cast<int8_t*>(row);
  auto* d = reinterpret_cast<float*>(row + k);
  auto* sums = reinterpret_cast<int32_t*>(d + k / 32);
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int q = static_cast<int>(std::roundf(xb[j] * id));
      qs[b * 32 + j] = static_cast<int8_t>(q);
      sum += q;
    }
    d[b] = f16_to_f32(f32_to_f16(db));
    sums[b] = sum;
  }
}

void quantize_q8_k_scalar(const float* x, uint8_t* row, int64_t k) {
  auto* qs = reinterpret_cast<int8_t*>(row);
  auto* d = reinterpret_cast<float*>(row + k);
  auto* bsums = reinterpret_cast<int16_t*>(d + k / 256);
  for (int64_t b = 0; b < k / 256; ++b) {
    const float* xb = x + b * 256;
    int8_t* qb = qs + b * 256;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 256; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax == 0.0f) {
      d[b] = 0.0f;
      std::memset(qb, 0, 256);
      for (int g = 0; g < 16; ++g) bsums[b * 16 + g] = 0;
      continue;
    }
    // -127: the largest magnitude maps to exactly -+127, as quantize_row(Q8_K) does.
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j) {
      const int v = nearest_int(iscale * xb[j]);
      qb[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += qb[g * 16 + j];
      bsums[b * 16 + g] = static_cast<int16_t>(sum);
    }
    d[b] = 1.0f / iscale;
  }
}

}  // namespace

void register_scalar_act_quant(KernelTable& kt) {
  kt.quantize_q8_32 = quantize_q8_32_scalar;
  kt.quantize_q8_k = quantize_q8_k_scalar;
}

}  // namespace ember::cpu
