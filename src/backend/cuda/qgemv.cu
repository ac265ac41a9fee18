// Tensor-core GEMV for packed int4 / FP8 / int8 weights (layout in qgemv.cuh), batches of 1-8
// rows: the direct kernel (x read from global memory per unit) and the dispatch to the staged
// kernel (qgemv_staged.cu), which the launchers below prefer when its shared memory fits.
//
// One block of 8 warps owns a tile of 16 weight rows (in GLU mode the same 16 rows of the gate
// and of the up matrix) and splits k among its warps: warp w takes the 16-byte-per-lane units
// w, w + 8, w + 16, ... (a unit is 128 elements for int4 = one scale group, 64 for fp8 and
// int8), with kStages units in flight. Each unit is dequantized in registers straight into
// mma.m16n8k16 A fragments (rows = weight rows, BF16; F16 for int8) and multiplied with x as
// the B operand (columns = batch rows, x rounded to the same type). Since a dot product may sum
// its k in any order, a lane's A registers hold the elements its own 16-byte slice of the row
// happens to contain, and its B registers take x at the same k: lane (g, t) = (lane / 4,
// lane % 4) reads rows g and g + 8 at k = unit * U + t * U / 4 + [0, U / 4), and mma step s
// uses elements 4s..4s+3 of that slice (logical k 2t, 2t+1 <- 4s, 4s+1; 2t+8, 2t+9 <- 4s+2, 4s+3).
//   int4: (w >> 4p) & 0x000f000f | 0x43004300 are two BF16 values 128 + nibble; minus 136
//         gives q exactly; a unit's 8 mma steps accumulate from zero and the group scales of
//         rows g and g + 8 multiply the F32 partial sums.
//   fp8:  e4m3 bits (sign, 4-bit exponent, 3-bit mantissa) shifted into a BF16 (sign, 8, 7)
//         are the value times 2^-120 (subnormals included); one bf16x2 multiply by 2^120
//         restores it; the per-row scale multiplies the final sum.
//   int8: bytes under 0x64 are F16 1152 + q, minus 1152 gives q exactly (i8x2_to_f16x2), F16
//         mma with x as F16; the per-row scale multiplies the final sum, as for fp8.
// The warps' partial sums meet in shared memory; the epilogue adds bias / applies the GLU.
// Weights and scales are loaded before griddepcontrol.wait (programmatic dependent launch),
// x after it.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/qgemv.cuh"
#include "backend/cuda/qgemv_wg.cuh"

#include <cstdlib>
#include <cstring>

namespace ember::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kStages = 4;

using QArgs = QGemvProblem;

// Four BF16 pairs of int4 word w (see the file comment), q in [-8, 7] exactly.
__device__ __forceinline__ void dequant_int4(uint32_t w, uint32_t r[4]) {
  const __nv_bfloat162 off = __halves2bfloat162(__ushort_as_bfloat16(0x4308), __ushort_as_bfloat16(0x4308));
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    uint32_t v = ((w >> (4 * p)) & 0x000f000fu) | 0x43004300u;
    __nv_bfloat162 b = __hsub2(*reinterpret_cast<__nv_bfloat162*>(&v), off);
    r[p] = *reinterpret_cast<uint32_t*>(&b);
  }
}

// Two e4m3 bytes (selected by prmt selector sel into the high bytes of each half) -> BF16 pair.
template <uint32_t kSel>
__device__ __forceinline__ uint32_t fp8x2_to_bf16x2(uint32_t w) {
  uint32_t d;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(d) : "r"(w), "n"(kSel));
  uint32_t v = ((d >> 4) & 0x07f007f0u) | (d & 0x80008000u);
  const __nv_bfloat162 two120 = __halves2bfloat162(__ushort_as_bfloat16(0x7b80), __ushort_as_bfloat16(0x7b80));
  __nv_bfloat162 b = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&v), two120);
  return *reinterpret_cast<uint32_t*>(&b);
}

template <QFormat F>
struct Fmt;
template <>
struct Fmt<QFormat::Int4> {
  static constexpr int kUnit = 128;  // elements per unit (a lane's 16 bytes cover kUnit / 4)
  static constexpr int kSteps = 8;   // mma k16 steps per unit
  using T = __nv_bfloat16;           // mma operand type (x is rounded to it)
};
template <>
struct Fmt<QFormat::Fp8> {
  static constexpr int kUnit = 64;
  static constexpr int kSteps = 4;
  using T = __nv_bfloat16;
};
template <>
struct Fmt<QFormat::Int8> {  // the fp8 path with F16 operands (1-byte weights, per-row scales)
  static constexpr int kUnit = 64;
  static constexpr int kSteps = 4;
  using T = __half;
};

// Elements 0, 1 (pair_lo) / 2, 3 (pair_hi) of an fp8 / int8 word as an operand pair of Fmt<F>::T.
template <QFormat F>
__device__ __forceinline__ uint32_t pair_lo(uint32_t w) {
  if constexpr (F == QFormat::Int8) return i8x2_to_f16x2<0x4140>(w);
  else return fp8x2_to_bf16x2<0x1404>(w);
}
template <QFormat F>
__device__ __forceinline__ uint32_t pair_hi(uint32_t w) {
  if constexpr (F == QFormat::Int8) return i8x2_to_f16x2<0x4342>(w);
  else return fp8x2_to_bf16x2<0x3424>(w);
}

// One weight stream of a warp: 16 bytes of rows g and g + 8 per unit (+ the int4 scales).
struct Stage {
  uint4 lo, hi;
  uint32_t s;  // int4: bf16 scales of rows g (low half) and g + 8 (high half)
};

template <QFormat F, int S>
struct Streams {
  const uint8_t* row_lo[S];
  const uint8_t* row_hi[S];
  const __nv_bfloat16* sc_lo[S];  // int4 scales of rows g, g + 8 at group 0 (stride 16: qweight_int4_scale_index)
  const __nv_bfloat16* sc_hi[S];
};

template <QFormat F, int S>
__device__ __forceinline__ void load_unit(Stage (&st)[S], const Streams<F, S>& ws, int unit, int t) {
  constexpr int kSliceBytes = 16;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const int64_t off = static_cast<int64_t>(unit) * (4 * kSliceBytes) + t * kSliceBytes;
    st[s].lo = load_stream_16(ws.row_lo[s] + off);
    st[s].hi = load_stream_16(ws.row_hi[s] + off);
    if constexpr (F == QFormat::Int4) {
      const uint32_t a = __bfloat16_as_ushort(ws.sc_lo[s][unit * 16]);
      const uint32_t b = __bfloat16_as_ushort(ws.sc_hi[s][unit * 16]);
      st[s].s = a | (b << 16);
    }
  }
}

// B fragments of one unit: x row g (zero for g >= n or past k) at the lane's slice.
template <QFormat F>
__device__ __forceinline__ void load_x(const float* x, int64_t k, int n, int unit, int g, int t,
                                       uint32_t (&b)[Fmt<F>::kSteps][2]) {
  constexpr int kSpan = Fmt<F>::kUnit / 4;
  const int64_t k0 = static_cast<int64_t>(unit) * Fmt<F>::kUnit + t * kSpan;
#pragma unroll
  for (int s = 0; s < Fmt<F>::kSteps; ++s) {
    const int64_t kk = k0 + 4 * s;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (g < n && kk < k) v = __ldg(reinterpret_cast<const float4*>(x + g * k + kk));
    b[s][0] = pack2<typename Fmt<F>::T>(v.x, v.y);
    b[s][1] = pack2<typename Fmt<F>::T>(v.z, v.w);
  }
}

// acc += this unit's products (int4: scaled by the group scales of rows g and g + 8; fp8 and int8
// unscaled).
template <QFormat F>
__device__ __forceinline__ void mma_unit(const Stage& st, const uint32_t (&b)[Fmt<F>::kSteps][2],
                                         float acc[4]) {
  const uint32_t lo[4] = {st.lo.x, st.lo.y, st.lo.z, st.lo.w};
  const uint32_t hi[4] = {st.hi.x, st.hi.y, st.hi.z, st.hi.w};
  if constexpr (F == QFormat::Int4) {
    float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t rl[4], rh[4];
      dequant_int4(lo[i], rl);
      dequant_int4(hi[i], rh);
      // step 2i: pairs 0 (k 4s, 4s+1) and 1 (4s+2, 4s+3); step 2i + 1: pairs 2 and 3.
      const uint32_t a0[4] = {rl[0], rh[0], rl[1], rh[1]};
      const uint32_t a1[4] = {rl[2], rh[2], rl[3], rh[3]};
      mma_16816<__nv_bfloat16>(part, a0, b[2 * i][0], b[2 * i][1]);
      mma_16816<__nv_bfloat16>(part, a1, b[2 * i + 1][0], b[2 * i + 1][1]);
    }
    const float s_lo = bf16_lo(st.s), s_hi = bf16_hi(st.s);
    acc[0] = fmaf(s_lo, part[0], acc[0]);
    acc[1] = fmaf(s_lo, part[1], acc[1]);
    acc[2] = fmaf(s_hi, part[2], acc[2]);
    acc[3] = fmaf(s_hi, part[3], acc[3]);
  } else {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint32_t a[4] = {pair_lo<F>(lo[s]), pair_lo<F>(hi[s]), pair_hi<F>(lo[s]), pair_hi<F>(hi[s])};
      mma_16816<typename Fmt<F>::T>(acc, a, b[s][0], b[s][1]);
    }
  }
}

// S weight streams (1, or 2 in GLU mode) over one 16-row tile.
template <QFormat F, int S>
__global__ void __launch_bounds__(kWarps * 32) qgemv_kernel(const QArgs A) {
  constexpr bool kGlu = S == 2;
  __shared__ float red[kWarps][32][4 * S];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int tile = blockIdx.x;
  // The segment of this tile (constant indices only: A stays in parameter space).
  const uint8_t* w0 = A.w[0];
  const void* sc0 = A.scales[0];
  const float* bias = A.bias[0];
  float* out = A.out[0];
  bool accumulate = A.accumulate[0];
  int64_t m = A.m[0];
  int t0 = 0;
#pragma unroll
  for (int s = 1; s < kQGemvMaxSegs; ++s) {
    if (!kGlu && s < A.n_segs && tile >= A.tile_end[s - 1]) {
      w0 = A.w[s];
      sc0 = A.scales[s];
      bias = A.bias[s];
      out = A.out[s];
      accumulate = A.accumulate[s];
      m = A.m[s];
      t0 = A.tile_end[s - 1];
    }
  }
  const int64_t row0 = static_cast<int64_t>(tile - t0) * 16;
  // Rows past m re-read row m - 1 and are never stored.
  const int64_t r_lo = min(row0 + g, m - 1), r_hi = min(row0 + g + 8, m - 1);
  Streams<F, S> ws;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const uint8_t* w = s == 0 ? w0 : A.w[1];
    const void* sc = s == 0 ? sc0 : A.scales[1];
    ws.row_lo[s] = w + r_lo * A.row_bytes;
    ws.row_hi[s] = w + r_hi * A.row_bytes;
    // (rows past m read their own scale, 0, in the tile's padding)
    ws.sc_lo[s] = static_cast<const __nv_bfloat16*>(sc) + qweight_int4_scale_index(A.n_units, row0 + g, 0);
    ws.sc_hi[s] = static_cast<const __nv_bfloat16*>(sc) + qweight_int4_scale_index(A.n_units, row0 + g + 8, 0);
  }

  float acc[S][4];
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[s][i] = 0.0f;

  const int n_units = A.n_units;
  Stage st[kStages][S];
#pragma unroll
  for (int p = 0; p < kStages; ++p) {
    const int u = warp + p * kWarps;
    if (u < n_units) load_unit<F, S>(st[p], ws, u, t);
  }
  pdl_wait();
  pdl_launch_dependents();
  for (int base = warp; base < n_units; base += kStages * kWarps) {
#pragma unroll
    for (int p = 0; p < kStages; ++p) {
      const int u = base + p * kWarps;
      if (u < n_units) {
        uint32_t b[Fmt<F>::kSteps][2];
        load_x<F>(A.x, A.k, A.n, u, g, t, b);
#pragma unroll
        for (int s = 0; s < S; ++s) mma_unit<F>(st[p][s], b, acc[s]);
        const int u2 = u + kStages * kWarps;
        if (u2 < n_units) load_unit<F, S>(st[p], ws, u2, t);
      }
    }
  }
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][lane][4 * s + i] = acc[s][i];
  __syncthreads();
  if (threadIdx.x >= 128) return;
  // Thread (l, v): lane l's accumulator v = row (l / 4) + 8 * (v / 2), batch column 2 (l % 4) + v % 2.
  const int l = threadIdx.x / 4, v = threadIdx.x % 4;
  const int64_t row = row0 + l / 4 + 8 * (v / 2);
  const int col = 2 * (l % 4) + (v % 2);
  if (row >= m || col >= A.n) return;
  float sum[S];
#pragma unroll
  for (int s = 0; s < S; ++s) {
    float z = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) z += red[w][l][4 * s + v];
    if constexpr (F != QFormat::Int4) z *= static_cast<const float*>(s == 0 ? sc0 : A.scales[1])[row];
    sum[s] = z;
  }
  const int64_t i = col * m + row;
  if constexpr (kGlu) {
    if (A.gate_out) A.gate_out[i] = sum[0];
    if (A.up_out) A.up_out[i] = sum[1];
    A.glu_out[i] = glu_act(sum[0], A.gelu) * sum[1];
  } else {
    const float y = sum[0] + (bias ? bias[row] : 0.0f);
    out[i] = accumulate ? out[i] + y : y;
  }
}

template <int S>
cudaError_t launch(QFormat f, const QArgs& A, bool pdl, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(A.n_tiles));
  if (f == QFormat::Int4)
    return launch_kernel(qgemv_kernel<QFormat::Int4, S>, grid, dim3(kWarps * 32), 0, stream, pdl, A);
  if (f == QFormat::Int8)
    return launch_kernel(qgemv_kernel<QFormat::Int8, S>, grid, dim3(kWarps * 32), 0, stream, pdl, A);
  return launch_kernel(qgemv_kernel<QFormat::Fp8, S>, grid, dim3(kWarps * 32), 0, stream, pdl, A);
}

QArgs base_args(QFormat f, const float* x, int n, int64_t k) {
  QArgs A;
  A.x = x;
  A.n = n;
  A.k = k;
  A.row_bytes = static_cast<int64_t>(qweight_row_bytes(f, k));
  A.n_units = static_cast<int>(qweight_k_pad(f, k) / qformat_unit(f));
  return A;
}

const void* scales_of(QFormat f, const void* w, int64_t m, int64_t k) {
  return static_cast<const uint8_t*>(w) + qweight_scales_offset(f, m, k);
}

// The FP8 wgmma GEMV: asked for, or (Auto) wanted for this kind (qgemv_fp8_wg_wanted).
bool use_fp8_wg(QGemvPath path, QFormat f, int n, int64_t k, int cluster, int kind) {
  if (f != QFormat::Fp8 || cluster > 1) return false;
  return path == QGemvPath::Fp8Wg || (path == QGemvPath::Auto && qgemv_fp8_wg_wanted(n, k, kind));
}

// Staged kernel unless the caller or EMBER_CUDA_QGEMV=direct asks for the direct one, or it does not
// take the problem (qgemv_staged_takes).
bool use_staged(QGemvPath path, QFormat f, int n, int64_t k, bool glu, bool norm) {
  static const bool env_direct = [] {
    const char* e = std::getenv("EMBER_CUDA_QGEMV");
    return e != nullptr && std::strcmp(e, "direct") == 0;
  }();
  if (path == QGemvPath::Direct || (path == QGemvPath::Auto && env_direct)) return false;
  return path == QGemvPath::Staged || qgemv_staged_takes(f, glu, norm, n, k);
}

}  // namespace

bool qgemv_takes_norm(QFormat f, int n, int64_t k, const void* x, const XNorm* norm, QGemvPath path) {
  if (!qgemv_supported(n, k, x) || !xnorm_supported(n, k, x, norm->out, norm->w, norm->w_bf16)) return false;
  // (Auto folds a norm only where the staged kernel could, which the FP8 wgmma GEMV falls back to.)
  if (path == QGemvPath::Fp8Wg) return f == QFormat::Fp8 && qgemv_fp8_wg_takes(n, k);
  return use_staged(path, f, n, k, false, true) && qgemv_staged_fits(f, n, k);
}

bool qgemv_prefetch_takes(QFormat f, int n, int64_t m, int64_t k, bool norm) {
  if (n < 1 || n > kQGemvMaxBatch || k % 8 != 0) return false;
  if (use_fp8_wg(QGemvPath::Auto, f, n, k, 0, qgemv_wg_kind(false, m, norm))) return false;
  return use_staged(QGemvPath::Auto, f, n, k, false, norm) && qgemv_staged_prefetch_path(f, n, k, norm);
}

bool qgemv_gate_takes(QFormat f, int n, int64_t m, int64_t k, bool norm) {
  if (n < 1 || n > kQGemvMaxBatch || k % 8 != 0) return false;
  if (use_fp8_wg(QGemvPath::Auto, f, n, k, 0, qgemv_wg_kind(false, m, norm))) return false;
  return use_staged(QGemvPath::Auto, f, n, k, false, norm) && qgemv_staged_gate_path(f, n, k, norm);
}

bool qgemv_supported(int n, int64_t k, const void* x) {
  return n >= 1 && n <= kQGemvMaxBatch && k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

bool qgemv_rope_takes(QFormat f, const QGemvSeg* segs, int n_segs, int n, int64_t k, const void* x,
                      const XNorm* norm, int head_dim) {
  if (n_segs != 3 || n != 1 || head_dim <= 0 || head_dim % 16 != 0 || !qgemv_supported(n, k, x)) return false;
  for (int s = 0; s < 3; ++s)
    if (segs[s].m <= 0 || segs[s].m % head_dim != 0 || segs[s].accumulate) return false;
  if (segs[1].m != segs[2].m) return false;
  const bool folded = norm && norm->w;
  if (folded && !qgemv_takes_norm(f, n, k, x, norm, QGemvPath::Auto)) return false;
  const int64_t rows = segs[0].m + segs[1].m + segs[2].m;
  if (use_fp8_wg(QGemvPath::Auto, f, n, k, 0, qgemv_wg_kind(false, rows, folded))) return false;
  return use_staged(QGemvPath::Auto, f, n, k, false, folded) && qgemv_staged_rope_path(f, n, k, folded);
}

cudaError_t launch_qgemv_multi(QFormat f, const QGemvSeg* segs, int n_segs, const float* x, int n,
                               int64_t k, bool pdl, cudaStream_t stream, QGemvPath path, const XNorm* norm,
                               int cluster, const GemvRope* rope, const L2Prefetch* prefetch,
                               const HoldGateUse* gate) {
  if (n_segs < 1 || n_segs > kQGemvMaxSegs || !qgemv_supported(n, k, x)) return cudaErrorInvalidValue;
  if (norm && norm->w && !qgemv_takes_norm(f, n, k, x, norm, path)) return cudaErrorInvalidValue;
  const bool roped = rope && rope->head_dim > 0;
  if (roped &&
      (path != QGemvPath::Auto || cluster > 1 || !qgemv_rope_takes(f, segs, n_segs, n, k, x, norm, rope->head_dim)))
    return cudaErrorInvalidValue;
  QArgs A = base_args(f, x, n, k);
  int tiles = 0, used = 0;
  for (int s = 0; s < n_segs; ++s) {
    if (segs[s].m == 0) continue;
    A.w[used] = static_cast<const uint8_t*>(segs[s].w);
    A.scales[used] = scales_of(f, segs[s].w, segs[s].m, k);
    A.bias[used] = segs[s].bias;
    A.out[used] = segs[s].out;
    A.accumulate[used] = segs[s].accumulate;
    A.m[used] = segs[s].m;
    tiles += static_cast<int>((segs[s].m + 15) / 16);
    A.tile_end[used] = tiles;
    ++used;
  }
  if (used == 0) return cudaSuccess;
  A.n_segs = used;
  A.n_tiles = tiles;
  if (norm) A.norm = *norm;
  A.cluster = cluster;
  // (qgemv_rope_takes: three segments of whole 16-row tiles, the staged kernel's path)
  if (roped) return launch_qgemv_staged(f, A, /*glu=*/false, pdl, stream, rope);
  if (use_fp8_wg(path, f, n, k, cluster, qgemv_wg_kind(false, int64_t{tiles} * 16, norm && norm->w))) {
    const cudaError_t e = launch_qgemv_fp8_wg(A, /*glu=*/false, pdl, stream);
    if (e != cudaErrorNotSupported || path == QGemvPath::Fp8Wg) return e;  // (Auto: too large for it)
  }
  if (use_staged(path, f, n, k, false, norm && norm->w))
    return launch_qgemv_staged(f, A, /*glu=*/false, pdl, stream, nullptr, path == QGemvPath::Auto ? prefetch : nullptr,
                               path == QGemvPath::Auto ? gate : nullptr);
  return launch<1>(f, A, pdl, stream);
}

cudaError_t launch_qgemv_glu(QFormat f, const void* w_gate, const void* w_up, const float* x, int n,
                             int64_t m, int64_t k, bool gelu_tanh, float* out, float* gate_out,
                             float* up_out, bool pdl, cudaStream_t stream, QGemvPath path, const XNorm* norm,
                             int cluster) {
  if (m == 0) return cudaSuccess;
  if (!qgemv_supported(n, k, x)) return cudaErrorInvalidValue;
  if (norm && norm->w && !qgemv_takes_norm(f, n, k, x, norm, path)) return cudaErrorInvalidValue;
  QArgs A = base_args(f, x, n, k);
  A.w[0] = static_cast<const uint8_t*>(w_gate);
  A.w[1] = static_cast<const uint8_t*>(w_up);
  A.scales[0] = scales_of(f, w_gate, m, k);
  A.scales[1] = scales_of(f, w_up, m, k);
  A.m[0] = A.m[1] = m;
  A.n_segs = 1;
  A.n_tiles = A.tile_end[0] = static_cast<int>((m + 15) / 16);
  A.glu_out = out;
  A.gate_out = gate_out == out ? nullptr : gate_out;
  A.up_out = up_out;
  A.gelu = gelu_tanh;
  if (norm) A.norm = *norm;
  A.cluster = cluster;
  if (use_fp8_wg(path, f, n, k, cluster, kWgGlu)) {
    const cudaError_t e = launch_qgemv_fp8_wg(A, /*glu=*/true, pdl, stream);
    if (e != cudaErrorNotSupported || path == QGemvPath::Fp8Wg) return e;  // (Auto: too large for it)
  }
  if (use_staged(path, f, n, k, true, norm && norm->w)) return launch_qgemv_staged(f, A, /*glu=*/true, pdl, stream);
  return launch<2>(f, A, pdl, stream);
}

}  // namespace ember::cuda
