#pragma once
// Internal kernel interface of the CPU backend: one KernelTable per instruction set, filled
// by dispatch.cpp from the scalar kernels and then overridden by the AVX2 / AVX-512 files.
// This header must stay free of inline code that does floating-point or vector work: it is
// included by files compiled with AVX-512 flags, and an inline function emitted there could
// be picked by the linker for baseline callers.
#include "core/dtype.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ember::cpu {

// Avx512Vbmi: Avx512 plus the VBMI byte permutes (Ice Lake, Zen 4 and later).
enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512 = 2, Avx512Vbmi = 3 };
std::string_view isa_name(Isa isa);
// Best instruction set this CPU supports (runtime check).
Isa detect_isa();
bool isa_supported(Isa isa);

// Activation rows for the integer dot products (each row 64-byte aligned in scratch):
//   Q8_32: [k int8 qs][k/32 float d][k/32 int32 sum(qs)]  d and qs equal quantize_row(Q8_0)
//          (d is the f16-rounded scale, as the block stores it)
//   Q8_K : [k int8 qs][k/256 float d][k/16 int16 bsums]   equal to quantize_row(Q8_K)
//   Q8_32P: Q8_32 with the qs of every 4 blocks (128 values) reordered as the halves
//          [b0 0-15 | b1 0-15 | b2 0-15 | b3 0-15 | b0 16-31 | ... | b3 16-31], so that the
//          low and high nibbles of 4 weight blocks line up with one 64-byte vector each;
//          trailing blocks (k/32 % 4) keep their order.
enum class ActFormat : int { F32 = 0, Q8_32 = 1, Q8_K = 2, Q8_32P = 3 };
// Reorders the qs of a Q8_32 row in place into Q8_32P.
void permute_q8_32_halves(uint8_t* row, int64_t k);
size_t act_row_bytes(ActFormat f, int64_t k);

// out[r, c] = dot(activation row r, weight row c) over k, for one block of outputs.
struct MatmulProblem {
  int64_t k = 0;
  const uint8_t* w = nullptr;  // [m, k] weight rows in their storage format
  size_t w_stride = 0;         // bytes per weight row
  const uint8_t* a = nullptr;  // [n, k] activation rows in the kernel's ActFormat
  size_t a_stride = 0;         // bytes per activation row
  float* out = nullptr;        // [n, m]
  int64_t out_stride = 0;      // floats per output row
};
// Computes out rows [r0, r1) x columns [c0, c1) (no bias).
using MatmulFn = void (*)(const MatmulProblem& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
struct MatmulKernel {
  ActFormat act = ActFormat::F32;
  MatmulFn fn = nullptr;
};

// Weight dtypes with a matmul kernel, as indices into KernelTable::matmul.
enum class WeightKind : int {
  F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Count
};
// -1 when dtype has no matmul kernel.
int weight_kind_index(DType t);

using QuantizeActFn = void (*)(const float* x, uint8_t* row, int64_t k);

// ---- Panel GEMM (many activation rows) ---------------------------------------------------
// Activations: panels of 16 rows; within a panel the quantized values are interleaved by
// groups of 4 (byte [g][row][t] = q[row][4g + t] + 128, so one 64-byte vector holds 4 values
// of each of 16 rows), plus per weight group (G elements) the activation scale da and
// da * sum(q) of each row.
// Weights: each column (weight row) decoded once per call to int8 values w8 (weight =
// scale * w8 + minv per group of G) and -128 * sum(w8) per group (cancels the +128).
constexpr int kGemmPanelRows = 16;
struct GemmPanel {
  const uint8_t* qu = nullptr;  // [k / 4][16][4]
  const float* da = nullptr;    // [k / G][16]
  const float* dsum = nullptr;  // [k / G][16] (formats with mins only)
  const int32_t* acorr = nullptr;  // [k / G][16] fused panels: -kOff * sum(q) of each row
};
// Layout of one decoded column: int8 w8[k]; float scale[k/G]; float minv[k/G]; int32 corr[k/G].
size_t gemm_col_bytes(int64_t k, int group);
using DecodeColFn = void (*)(const uint8_t* wrow, int64_t k, uint8_t* col);
// out[row, c] (row < valid_rows, c < nc) for one panel against nc decoded columns.
using GemmMicroFn = void (*)(const GemmPanel& ap, const uint8_t* cols, size_t col_stride, int nc, int64_t k,
                             float* out, int64_t out_stride, int valid_rows);
// Fused variant for few panels (a batched decode step): the panel keeps its values signed
// (byte [g][row][t] = q[row][4g + t]) and the weights' own unsigned codes u (weight =
// d * (u - kOff) or d * u + m) are the broadcast operand, read straight from the weight rows.
// The offset then costs -kOff * sum(q) per row and group (GemmPanel::acorr), computed once
// per panel, so no column is decoded into a buffer: each weight byte is touched once per
// panel. Integer sums are the same as the decoded path's, so outputs are bit-identical.
using GemmFusedFn = void (*)(const GemmPanel& ap, const uint8_t* w, size_t w_stride, int nc, int64_t k, float* out,
                             int64_t out_stride, int valid_rows);
struct GemmKernel {
  ActFormat act = ActFormat::Q8_32;  // activation rows the panels are built from
  int group = 0;          // G: 16 or 32
  bool has_min = false;   // weights carry a per-group offset (minv)
  DecodeColFn decode = nullptr;  // decode and micro null: the fused kernel for any row count
  GemmMicroFn micro = nullptr;
  GemmFusedFn fused = nullptr;  // null where the ISA has none
  int fused_off = 0;            // kOff of the fused weight codes
  int fused_min_rows = 0;       // rows from which the fused kernel beats the row tiles
};

struct KernelTable {
  Isa isa = Isa::Scalar;
  MatmulKernel matmul[static_cast<int>(WeightKind::Count)];
  // One activation row against weights streamed from memory (a decode step): where a narrower
  // ISA's kernel streams faster than the widest one (AVX2 vs AVX-512 for the 32-block formats
  // on Zen 4, bench/kernels), that one; else the same as `matmul`.
  MatmulKernel matmul_stream[static_cast<int>(WeightKind::Count)];
  GemmKernel gemm[static_cast<int>(WeightKind::Count)];  // empty where the ISA has none
  QuantizeActFn quantize_q8_32 = nullptr;
  QuantizeActFn quantize_q8_k = nullptr;
  // Vector helpers (attention, norms).
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
  // y[i] = y[i] * s + a * x[i]
  void (*scale_axpy_f32)(float* y, float s, float a, const float* x, int64_t n) = nullptr;
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n) = nullptr;
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n) = nullptr;
  // out = act(gate) * up, act = silu or gelu (tanh approximation).
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  void (*gelu_tanh_mul)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  // Sum of squares in double-free float arithmetic with a fixed lane order.
  float (*sum_squares)(const float* x, int64_t n) = nullptr;
  float (*max_f32)(const float* x, int64_t n) = nullptr;  // -inf for n == 0
  // First index of the largest value, NaN never winning; -1 when nothing exceeds -inf.
  int64_t (*argmax_f32)(const float* x, int64_t n) = nullptr;
  // x[i] = exp(x[i] - max) in place (exp(-inf) = 0); returns the sum.
  float (*exp_sub_sum)(float* x, float max, int64_t n) = nullptr;
  // Attention tiles (row-major, head_dim d):
  //   s[r * ld_s + t] = dot(q[r], k[t])            r < nr, t < nt <= 64
  //   (work: scratch of 64 * d floats, for a transposed copy of k)
  void (*attn_scores)(const float* q, int nr, const float* k, int nt, int d, float* s, int ld_s, float* work) = nullptr;
  //   o[r] += sum_t p[r * ld_p + t] * v[t]          r < nr (o rows of d floats)
  void (*attn_accumulate)(const float* p, int ld_p, int nr, const float* v, int nt, int d, float* o) = nullptr;
};

// The table for isa (which must be supported by this CPU).
KernelTable make_kernel_table(Isa isa);

// Per-ISA registration (each overrides the entries it implements).
void register_scalar_kernels(KernelTable& kt);
void register_scalar_matmul(KernelTable& kt);
void register_scalar_act_quant(KernelTable& kt);
#if defined(EMBER_CPU_X86)
void register_avx2_vec(KernelTable& kt);
void register_avx2_matmul_quant(KernelTable& kt);
void register_avx2_matmul_float(KernelTable& kt);
void register_avx512_vec(KernelTable& kt);
void register_avx512_matmul_quant(KernelTable& kt);
// The ymm (VNNI) row kernels of the 32-block formats as kt.matmul_stream (see dispatch.cpp).
void register_avx512_stream(KernelTable& kt);
void register_avx512_matmul_float(KernelTable& kt);
void register_avx512_vbmi_matmul(KernelTable& kt);
#endif

}  // namespace ember::cpu
