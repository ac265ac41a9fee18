// Scalar matmul kernels: the portable fallback, and the plainest statement of the integer
// arithmetic the SIMD kernels implement. Weights are decoded to small unsigned integers u;
// a weight is s * (u - offset) (or s * u - min), so each dot product is an integer sum of
// u * q (q the Q8 activation) corrected with the activation block sums.
#include "backend/cpu/kernels.h"
#include "core/half.h"
#include "quant/blocks.h"

#include <cstring>

namespace ember::cpu {

namespace {

using namespace ember::quant;

struct ActRow32 {  // view of a Q8_32 activation row
  const int8_t* qs;
  const float* d;
  const int32_t* sum;
  ActRow32(const uint8_t* row, int64_t k)
      : qs(reinterpret_cast<const int8_t*>(row)),
        d(reinterpret_cast<const float*>(row + k)),
        sum(reinterpret_cast<const int32_t*>(d + k / 32)) {}
};

struct ActRowK {  // view of a Q8_K activation row
  const int8_t* qs;
  const float* d;
  const int16_t* bsums;
  ActRowK(const uint8_t* row, int64_t k)
      : qs(reinterpret_cast<const int8_t*>(row)),
        d(reinterpret_cast<const float*>(row + k)),
        bsums(reinterpret_cast<const int16_t*>(d + k / 256)) {}
};

int32_t idot(const uint8_t* u, const int8_t* q, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<int32_t>(u[i]) * q[i];
  return s;
}

// ---- 32-element block formats: decode to u (0..31) and combine -------------------------

// Nibbles: element j in the low nibble of qs[j], element j+16 in the high nibble.
void unpack_nibbles(const uint8_t* qs, uint8_t* u) {
  for (int j = 0; j < 16; ++j) {
    u[j] = qs[j] & 0xf;
    u[j + 16] = qs[j] >> 4;
  }
}
void add_high_bits(const uint8_t* qh_bytes, uint8_t* u) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 32; ++j) u[j] = static_cast<uint8_t>(u[j] | (((qh >> j) & 1u) << 4));
}

float dot_q4_0(const uint8_t* w, const uint8_t* a, int64_t k) {
  const auto* b = reinterpret_cast<const BlockQ4_0*>(w);
  ActRow32 act(a, k);
  float acc = 0.0f;
  uint8_t u[32];
  for (int64_t i = 0; i < k / 32; ++i) {
    unpack_nibbles(b[i].qs, u);
    const int32_t s = idot(u, act.qs + i * 32, 32) - 8 * act.sum[i];
    acc += f16_to_f32(b[i].d) * act.d[i] * static_cast<float>(s);
  }
  return acc;
}

float dot_q4_1(const uint8_t* w, const uint8_t* a, int64_t k) {
  const auto* b = reinterpret_cast<const BlockQ4_1*>(w);
  ActRow32 act(a, k);
  float acc = 0.0f;
  uint8_t u[32];
  for (int64_t i = 0; i < k / 32; ++i) {
    unpack_nibbles(b[i].qs, u);
    const int32_t s = idot(u, act.qs + i * 32, 32);
    acc += act.d[i] * (f16_to_f32(b[i].d) * static_cast<float>(s) +
                       f16_to_f32(b[i].m) * static_cast<float>(act.sum[i]));
  }
  return acc;
}

float dot_q5_0(const uint8_t* w, const uint8_t* a, int64_t k) {
  const auto* b = reinterpret_cast<const BlockQ5_0*>(w);
  ActRow32 act(a, k);
  float acc = 0.0f;
  uint8_t u[32];
  for (int64_t i = 0; i < k / 32; ++i) {
    unpack_nibbles(b[i].qs, u);
    add_high_bits(b[i].qh, u);
    const int32_t s = idot(u, act.qs + i * 32, 32) - 16 * act.sum[i];
    acc += f16_to_f32(b[i].d) * act.d[i] * static_cast<float>(s);
  }
  return acc;
}

float dot_q5_1(const uint8_t* w, const uint8_t* a, int64_t k) {
  const auto* b = reinterpret_cast<const BlockQ5_1*>(w);
  ActRow32 act(a, k);
  float acc = 0.0f;
  uint8_t u[32];
  for (int64_t i = 0; i < k / 32; ++i) {
    unpack_nibbles(b[i].qs, u);
    add_high_bits(b[i].qh, u);
    const int32_t s = idot(u, act.qs + i * 32, 32);
    acc += act.d[i] * (f16_to_f32(b[i].d) * static_cast<float>(s) +
                       f16_to_f32(b[i].m) * static_cast<float>(act.sum[i]));
  }
  return acc;
}

float dot_q8_0(const uint8_t* w, const uint8_t* a, int64_t k) {
  const auto* b = reinterpret_cast<const BlockQ8_0*>(w);
  ActRow32 act(a, k);
  float acc = 0.0f;
  for (int64_t i = 0; i < k / 32; ++i) {
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += static_cast<int32_t>(b[i].qs[j]) * act.qs[i * 32 + j];
    acc += f16_to_f32(b[i].d) * act.d[i] * static_cast<float>(s);
  }
  return acc;
}

// ---- k-quants: 256-element super-blocks ------------------------------------------------

float dot_q2_k(const uint8_t* w, const uint8_t* a, int64_t k) {
  const auto* b = reinterpret_cast<const BlockQ2_K*>(w);
  ActRowK act(a, k);
  float acc = 0.0f;
  uint8_t u[256];
  for (int64_t i = 0; i < k / 256; ++i) {
    // element e = 128*half + 32*plane + l (l < 32): 2-bit plane `plane` of qs[32*half + l]
    for (int half = 0; half < 2; ++half)
      for (int plane = 0; plane < 4; ++plane)
        for (int l = 0; l < 32; ++l)
          u[128 * half + 32 * plane + l] = (b[i].qs[32 * half + l] >> (2 * plane)) & 3;
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += (b[i].scales[j] & 0xf) * idot(u + 16 * j, act.qs + i * 256 + 16 * j, 16);
      summ += (b[i].scales[j] >> 4) * act.bsums[i * 16 + j];
    }
    acc += act.d[i] * (f16_to_f32(b[i].d) * static_cast<float>(sumi) -
                       f16_to_f32(b[i].dmin) * static_cast<float>(summ));
  }
  return acc;
}

float dot_q3_k(const uint8_t* w, const uint8_t* a, int64_t k) {
  const auto* b = reinterpret_cast<const BlockQ3_K*>(w);
  ActRowK act(a, k);
  float acc = 0.0f;
  uint8_t u[256];
  for (int64_t i = 0; i < k / 256; ++i) {
    // u = low 2 bits + 4 * hmask bit (value u - 4); hmask bit 4*half + plane of hmask[l]
    for (int half = 0; half < 2; ++half)
      for (int plane = 0; plane < 4; ++plane)
        for (int l = 0; l < 32; ++l) {
          const int lo = (b[i].qs[32 * half + l] >> (2 * plane)) & 3;
          const int hi = (b[i].hmask[l] >> (4 * half + plane)) & 1;
          u[128 * half + 32 * plane + l] = static_cast<uint8_t>(lo + 4 * hi);
        }
    int32_t sumi = 0;
    for (int j = 0; j < 16; ++j) {
      const int32_t s = idot(u + 16 * j, act.qs + i * 256 + 16 * j, 16) - 4 * act.bsums[i * 16 + j];
      sumi += q3k_scale(j, b[i].scales) * s;
    }
    acc += act.d[i] * f16_to_f32(b[i].d) * static_cast<float>(sumi);
  }
  return acc;
}

float dot_q4_k(const uint8_t* w, const uint8_t* a, int64_t k) {
  const auto* b = reinterpret_cast<const BlockQ4_K*>(w);
  ActRowK act(a, k);
  float acc = 0.0f;
  uint8_t u[256];
  for (int64_t i = 0; i < k / 256; ++i) {
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        u[64 * c + l] = b[i].qs[32 * c + l] & 0xf;
        u[64 * c + 32 + l] = b[i].qs[32 * c + l] >> 4;
      }
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      kquant_scale_min(j, b[i].scales, &sc, &mn);
      sumi += sc * idot(u + 32 * j, act.qs + i * 256 + 32 * j, 32);
      summ += mn * (act.bsums[i * 16 + 2 * j] + act.bsums[i * 16 + 2 * j + 1]);
    }
    acc += act.d[i] * (f16_to_f32(b[i].d) * static_cast<float>(sumi) -
                       f16_to_f32(b[i].dmin) * static_cast<float>(summ));
  }
  return acc;
}

float dot_q5_k(const uint8_t* w, const uint8_t* a, int64_t k) {
  const auto* b = reinterpret_cast<const BlockQ5_K*>(w);
  ActRowK act(a, k);
  float acc = 0.0f;
  uint8_t u[256];
  for (int64_t i = 0; i < k / 256; ++i) {
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const int h = b[i].qh[l];
        u[64 * c + l] = static_cast<uint8_t>((b[i].qs[32 * c + l] & 0xf) | (((h >> (2 * c)) & 1) << 4));
        u[64 * c + 32 + l] = static_cast<uint8_t>((b[i].qs[32 * c + l] >> 4) | (((h >> (2 * c + 1)) & 1) << 4));
      }
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      kquant_scale_min(j, b[i].scales, &sc, &mn);
      sumi += sc * idot(u + 32 * j, act.qs + i * 256 + 32 * j, 32);
      summ += mn * (act.bsums[i * 16 + 2 * j] + act.bsums[i * 16 + 2 * j + 1]);
    }
    acc += act.d[i] * (f16_to_f32(b[i].d) * static_cast<float>(sumi) -
                       f16_to_f32(b[i].dmin) * static_cast<float>(summ));
  }
  return acc;
}

float dot_q6_k(const uint8_t* w, const uint8_t* a, int64_t k) {
  const auto* b = reinterpret_cast<const BlockQ6_K*>(w);
  ActRowK act(a, k);
  float acc = 0.0f;
  uint8_t u[256];
  for (int64_t i = 0; i < k / 256; ++i) {
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b[i].ql + 64 * half;
      const uint8_t* qh = b[i].qh + 32 * half;
      uint8_t* y = u + 128 * half;
      for (int l = 0; l < 32; ++l) {
        y[l] = static_cast<uint8_t>((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4));
        y[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4));
        y[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        y[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    }
    int32_t sumi = 0;
    for (int j = 0; j < 16; ++j) {
      const int32_t s = idot(u + 16 * j, act.qs + i * 256 + 16 * j, 16) - 32 * act.bsums[i * 16 + j];
      sumi += b[i].scales[j] * s;
    }
    acc += act.d[i] * f16_to_f32(b[i].d) * static_cast<float>(sumi);
  }
  return acc;
}

// ---- float weights ---------------------------------------------------------------------

template <typename Load>
float dot_float(const uint8_t* w, const float* x, int64_t k, Load load) {
  float s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= k; i += 4)
    for (int j = 0; j < 4; ++j) s[j] += load(w, i + j) * x[i + j];
  for (; i < k; ++i) s[0] += load(w, i) * x[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

float dot_f32w(const uint8_t* w, const uint8_t* a, int64_t k) {
  return dot_float(w, reinterpret_cast<const float*>(a), k, [](const uint8_t* p, int64_t i) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  });
}
float dot_f16w(const uint8_t* w, const uint8_t* a, int64_t k) {
  return dot_float(w, reinterpret_cast<const float*>(a), k, [](const uint8_t* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return f16_to_f32(h);
  });
}
float dot_bf16w(const uint8_t* w, const uint8_t* a, int64_t k) {
  return dot_float(w, reinterpret_cast<const float*>(a), k, [](const uint8_t* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return bf16_to_f32(h);
  });
}

template <float (*Dot)(const uint8_t*, const uint8_t*, int64_t)>
void matmul_rows(const MatmulProblem& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* a = p.a + static_cast<size_t>(r) * p.a_stride;
    float* out = p.out + r * p.out_stride;
    for (int64_t c = c0; c < c1; ++c) out[c] = Dot(p.w + static_cast<size_t>(c) * p.w_stride, a, p.k);
  }
}

}  // namespace

void register_scalar_matmul(KernelTable& kt) {
  auto set = [&](WeightKind w, ActFormat f, MatmulFn fn) {
    kt.matmul[static_cast<int>(w)] = MatmulKernel{f, fn};
  };
  set(WeightKind::F32, ActFormat::F32, matmul_rows<dot_f32w>);
  set(WeightKind::F16, ActFormat::F32, matmul_rows<dot_f16w>);
  set(WeightKind::BF16, ActFormat::F32, matmul_rows<dot_bf16w>);
  set(WeightKind::Q4_0, ActFormat::Q8_32, matmul_rows<dot_q4_0>);
  set(WeightKind::Q4_1, ActFormat::Q8_32, matmul_rows<dot_q4_1>);
  set(WeightKind::Q5_0, ActFormat::Q8_32, matmul_rows<dot_q5_0>);
  set(WeightKind::Q5_1, ActFormat::Q8_32, matmul_rows<dot_q5_1>);
  set(WeightKind::Q8_0, ActFormat::Q8_32, matmul_rows<dot_q8_0>);
  set(WeightKind::Q2_K, ActFormat::Q8_K, matmul_rows<dot_q2_k>);
  set(WeightKind::Q3_K, ActFormat::Q8_K, matmul_rows<dot_q3_k>);
  set(WeightKind::Q4_K, ActFormat::Q8_K, matmul_rows<dot_q4_k>);
  set(WeightKind::Q5_K, ActFormat::Q8_K, matmul_rows<dot_q5_k>);
  set(WeightKind::Q6_K, ActFormat::Q8_K, matmul_rows<dot_q6_k>);
}

}  // namespace ember::cpu
