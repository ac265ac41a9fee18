// Packed int4 GEMM for 9-64 rows of x (qgemm.cuh), the GEMV's mma scheme (qgemv.cu) with
// more x rows and more weight rows a warp:
//   - a block of 4 warps owns 128 weight rows (warp w: rows 32w..32w+31 as two m16 tiles) and
//     one k slice of `units` 128-element groups; lane (g, t) reads 16 bytes of rows g, g + 8,
//     g + 16, g + 24 per unit straight into registers (the unit's lane slice, as in the GEMV:
//     the A fragments hold the elements the lane's own 16 bytes contain and the B fragments
//     take x at the same k), P units ahead, issued before griddepcontrol.wait;
//   - each nibble pair is widened to BF16 136 + q, minus 136 (exact), times the group scale
//     (one rounding: the BF16 value q * scale, what the dequantizing fallback stores), so one
//     A fragment serves all NT n8 tiles of x;
//   - x is converted once per GEMM to BF16 in the GEMV's staged order (a unit's chunk c at
//     (c % 4) * 64 + (c / 4) * 16, so lane t's four 16-byte chunks sit at t * 16 + j * 64)
//     and streamed through shared memory in phases of kc units (two buffers, cp.async, one
//     block barrier a phase); rows are padded by 64 bytes so that the 8 lanes of a 16-byte
//     load phase (rows g, g + 1) hit all 32 banks;
//   - the k slices of a row block are the blocks of one cluster: each leaves its partial sums
//     in its shared memory, and after a cluster barrier block s adds its share of the rows
//     over all slices in slice order (distributed shared memory), so the result does not depend
//     on timing, and no workspace or second launch is needed.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/qgemm.cuh"
#include "backend/cuda/qgemm_common.cuh"
#include "backend/cuda/smem_limit.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

namespace ember::cuda {

namespace {

namespace cg = cooperative_groups;
using namespace qgemm_detail;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// A unit: one int4 scale group (128 elements) or 64 int8 elements, 64 bytes of a weight row
// either way; staged x takes 2 bytes an element (BF16 for int4, F16 for int8).
constexpr int unit_elems(QFormat f) { return f == QFormat::Int4 ? 128 : 64; }
constexpr int x_unit_bytes(QFormat f) { return 2 * unit_elems(f); }
constexpr int kRowPad = 64;              // bytes after each staged x row (bank spread)
constexpr int kRedStride = kQGemmRows + 4;  // floats per partial-sum row (column of out)
constexpr int kSmemPerSm = 200 * 1024;   // dynamic shared memory the resident blocks of an SM share
// Units of x a phase stages by default: small phases start the first multiply sooner (H200,
// n = 16: gate/up 21.1 -> 19.6 us, down 26.9 -> 23.5, lm_head 136.6 -> 124.4 against as many
// as fit; level at 32 rows, where two is what fits).
constexpr int kDefaultPhase = 2;
// The offset-sum multiply (exact weights, one instruction a weight pair before the mma) by
// default; false: BF16 q * scale fragments (three instructions a pair).
constexpr bool kDefaultOffsetSums = true;
// Resident blocks an SM: four (128 registers a thread), two for eight n8 tiles, which need
// more registers (H200, n = 16 / 32: four blocks of 128 beat two of 222-255 by 5-30%, the
// 4096 x 14336 down projection at 16 rows 38.3 -> 26.9 us).
constexpr int blocks_of(int nt) { return nt == 8 ? 2 : 4; }
// Weight units a warp holds in registers ahead of use (without spills, ptxas sm_90a).
constexpr int kPrefetch = 2;

// Rows of x the kernel multiplies: two, four or eight n8 tiles.
int n_pad_of(int n) { return n <= 16 ? 16 : n <= 32 ? 32 : 64; }
// Shared memory of a block staging kc units a phase: two x buffers of n_pad rows (and, with
// offset sums, two of the units' x sums), or the partial-sum tile that overlays them.
size_t smem_bytes(QFormat f, int n_pad, int kc, bool offset) {
  const size_t x = size_t{2} * n_pad * (kc * x_unit_bytes(f) + kRowPad + (offset ? kc * 4 : 0));
  const size_t red = size_t{4} * n_pad * kRedStride;
  return std::max(x, red);
}
// Units of x a phase may stage within the block's share of the SM, at most `units`.
int phase_units(QFormat f, int n_pad, int units, bool offset) {
  int kc = 1;
  while (kc < units &&
         smem_bytes(f, n_pad, kc + 1, offset) <= static_cast<size_t>(kSmemPerSm / blocks_of(n_pad / 8)))
    ++kc;
  return kc;
}

struct Params : PackedGemmArgs {
  const uint8_t* xq = nullptr;  // [n_pad][units_total * x_unit_bytes] BF16 (int8: F16) in lane order
  const float* xsum = nullptr;  // offset sums: [units_total][n_pad] F32, the units' sums of that BF16 x
  int kc = 0;                   // units per phase
};

// One unit of a warp's weights: lane slices of rows g, g + 8 of m16 tiles 0 and 1, and their scales.
struct WUnit {
  uint4 w[2][2];     // [tile][lo, hi]
  uint32_t s[2][2];  // int4: [tile][lo, hi] BF16 bits of the group scales
};

struct WPtrs {
  const uint8_t* row[2][2];          // this lane's 16 bytes of unit 0
  const __nv_bfloat16* sc[2][2];     // int4: scale of (row, unit 0); stride 16 a unit
};

template <QFormat F>
__device__ __forceinline__ void load_wunit(WUnit& u, const WPtrs& p, int unit) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      u.w[mt][h] = load_stream_16(p.row[mt][h] + static_cast<int64_t>(unit) * 64);
      if constexpr (F == QFormat::Int4)
        u.s[mt][h] = __ldg(reinterpret_cast<const unsigned short*>(p.sc[mt][h]) + static_cast<int64_t>(unit) * 16);
    }
}

// B fragments of word i of the lane slice for each x tile j (rows 8j + g of the staged unit at xs).
template <int NT>
__device__ __forceinline__ void load_x_tiles(const uint8_t* xs, int x_stride, int i, uint4 (&xb)[NT]) {
#pragma unroll
  for (int j = 0; j < NT; ++j) xb[j] = *reinterpret_cast<const uint4*>(xs + j * 8 * x_stride + i * 64);
}

template <int NT>
__device__ __forceinline__ void zero_tiles(float (&a)[2][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) a[mt][j][v] = 0.0f;
}

// acc[tile][j] += this unit's products with x tiles j: B fragments from the staged unit at xs;
// kOffset: the mma sums (136 + q) x and 136 * (the unit's x sums at xsum, this lane's columns
// 2t, 2t + 1 of each tile) comes off before the group scale multiplies (exact weights, three
// instructions fewer a weight pair); else the A fragments are the BF16 values q * scale.
// (The three cases keep their own loops over x chunks: one loop with the fragments built by a
// shared helper spilled 4-16 bytes in two of the kernels, ptxas sm_90a.)
template <QFormat F, int NT, bool kOffset>
__device__ __forceinline__ void mma_wunit(const WUnit& u, const uint8_t* xs, int x_stride, const float* xsum,
                                          float (&acc)[2][NT][4]) {
  if constexpr (F == QFormat::Int8) {
    // Words 2c, 2c + 1 of the lane slice against x chunk c (staged in the order 0, 2, 1, 3 of
    // each 4 elements, as the GEMV): one k step each, F16 1152 + q minus 1152 (exact).
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      uint4 xb[NT];
      load_x_tiles(xs, x_stride, c, xb);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const uint32_t lo0 = (&u.w[mt][0].x)[2 * c], hi0 = (&u.w[mt][1].x)[2 * c];
        const uint32_t lo1 = (&u.w[mt][0].x)[2 * c + 1], hi1 = (&u.w[mt][1].x)[2 * c + 1];
        const uint32_t a0 = i8x2_to_f16x2<0x4240>(lo0), a1 = i8x2_to_f16x2<0x4240>(hi0);
        const uint32_t a2 = i8x2_to_f16x2<0x4341>(lo0), a3 = i8x2_to_f16x2<0x4341>(hi0);
        const uint32_t b0 = i8x2_to_f16x2<0x4240>(lo1), b1 = i8x2_to_f16x2<0x4240>(hi1);
        const uint32_t b2 = i8x2_to_f16x2<0x4341>(lo1), b3 = i8x2_to_f16x2<0x4341>(hi1);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          mma_k16<__half>(acc[mt][j], a0, a1, a2, a3, xb[j].x, xb[j].y);
          mma_k16<__half>(acc[mt][j], b0, b1, b2, b3, xb[j].z, xb[j].w);
        }
      }
    }
  } else if constexpr (kOffset) {
    float part[2][NT][4];
    zero_tiles(part);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint4 xb[NT];
      load_x_tiles(xs, x_stride, i, xb);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const uint32_t lo = (&u.w[mt][0].x)[i], hi = (&u.w[mt][1].x)[i];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          mma_k16(part[mt][j], i4pair(lo, 0), i4pair(hi, 0), i4pair(lo, 1), i4pair(hi, 1), xb[j].x, xb[j].y);
          mma_k16(part[mt][j], i4pair(lo, 2), i4pair(hi, 2), i4pair(lo, 3), i4pair(hi, 3), xb[j].z, xb[j].w);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const float sl = bf16_lo(u.s[mt][0]), sh = bf16_lo(u.s[mt][1]);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float2 xv = *reinterpret_cast<const float2*>(xsum + j * 8);
        acc[mt][j][0] = fmaf(sl, fmaf(-136.0f, xv.x, part[mt][j][0]), acc[mt][j][0]);
        acc[mt][j][1] = fmaf(sl, fmaf(-136.0f, xv.y, part[mt][j][1]), acc[mt][j][1]);
        acc[mt][j][2] = fmaf(sh, fmaf(-136.0f, xv.x, part[mt][j][2]), acc[mt][j][2]);
        acc[mt][j][3] = fmaf(sh, fmaf(-136.0f, xv.y, part[mt][j][3]), acc[mt][j][3]);
      }
    }
  } else {
    __nv_bfloat162 s2[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __nv_bfloat16 s = __ushort_as_bfloat16(static_cast<unsigned short>(u.s[mt][h]));
        s2[mt][h] = __halves2bfloat162(s, s);
      }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // word i of the lane slice: elements 8i..8i+7, k steps 2i, 2i + 1
      uint4 xb[NT];
      load_x_tiles(xs, x_stride, i, xb);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const uint32_t lo = (&u.w[mt][0].x)[i], hi = (&u.w[mt][1].x)[i];
        const uint32_t l0 = i4_scaled(lo, 0, s2[mt][0]), l1 = i4_scaled(lo, 1, s2[mt][0]);
        const uint32_t l2 = i4_scaled(lo, 2, s2[mt][0]), l3 = i4_scaled(lo, 3, s2[mt][0]);
        const uint32_t h0 = i4_scaled(hi, 0, s2[mt][1]), h1 = i4_scaled(hi, 1, s2[mt][1]);
        const uint32_t h2 = i4_scaled(hi, 2, s2[mt][1]), h3 = i4_scaled(hi, 3, s2[mt][1]);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          mma_k16(acc[mt][j], l0, h0, l1, h1, xb[j].x, xb[j].y);
          mma_k16(acc[mt][j], l2, h2, l3, h3, xb[j].z, xb[j].w);
        }
      }
    }
  }
}

// x [n, k] F32 -> xq [n_pad, units * unit_elems] in lane order (zero past n and k): int4 BF16,
// a unit's 8-element chunk c at (c % 4) * 64 + (c / 4) * 16, and the sum of each unit's BF16 x
// a row in xsum [units][n_pad]; int8 F16 in the order 0, 2, 1, 3 of each 4 elements, chunk c at
// (c % 2) * 64 + (c / 2) * 16 (the staged GEMV's layouts). One thread a chunk (k % 8 == 0, so
// a chunk is all in or all out); the chunks of a unit are adjacent lanes (n_pad * units *
// chunks is a multiple of the block, so every lane of a warp takes part in the shuffles).
template <QFormat F>
__global__ void __launch_bounds__(256) qgemm_stage_x_kernel(const float* x, int n, int64_t k, int n_pad, int units,
                                                            uint8_t* xq, float* xsum) {
  pdl_wait();
  pdl_launch_dependents();
  constexpr int kChunks = unit_elems(F) / 8;
  const int64_t per_row = int64_t{units} * kChunks;
  const int64_t total = n_pad * per_row;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < total; q += int64_t{gridDim.x} * blockDim.x) {
    const int row = static_cast<int>(q / per_row);
    const int64_t cc = q % per_row;
    const int64_t u = cc / kChunks;
    const int c = static_cast<int>(cc % kChunks);
    const int64_t k0 = u * unit_elems(F) + c * 8;
    float4 v0 = make_float4(0.f, 0.f, 0.f, 0.f), v1 = v0;
    if (row < n && k0 < k) {
      const float4* xp = reinterpret_cast<const float4*>(x + row * k + k0);
      v0 = __ldg(xp);
      v1 = __ldg(xp + 1);
    }
    uint8_t* dst = xq + row * (units * int64_t{x_unit_bytes(F)}) + u * x_unit_bytes(F);
    if constexpr (F == QFormat::Int4) {
      const uint4 o = bf16x8(v0, v1);
      *reinterpret_cast<uint4*>(dst + (c % 4) * 64 + (c / 4) * 16) = o;
      float sum = bf16x8_sum(o);
#pragma unroll
      for (int d = 8; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
      if (c == 0) xsum[u * n_pad + row] = sum;
    } else {
      const uint4 o = make_uint4(pack2<__half>(v0.x, v0.z), pack2<__half>(v0.y, v0.w), pack2<__half>(v1.x, v1.z),
                                 pack2<__half>(v1.y, v1.w));
      *reinterpret_cast<uint4*>(dst + (c % 2) * 64 + (c / 2) * 16) = o;
    }
  }
}

template <QFormat F, int NT, bool kOffset>
__global__ void __launch_bounds__(kThreads, blocks_of(NT)) qgemm_kernel(const Params A) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // clusters (qgemm_available keeps other GPUs off it)
  constexpr int kUnitBytes = x_unit_bytes(F);
  constexpr int kNPad = NT * 8;
  constexpr int P = kPrefetch;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int split = blockIdx.x, rb = blockIdx.y;
  const int u_begin = split * A.units;
  const int nu = max(0, min(A.units, A.units_total - u_begin));
  const int kc = A.kc;
  const int x_stride = kc * kUnitBytes + kRowPad;
  const int64_t row0 = int64_t{rb} * kQGemmRows + warp * 32;
  // x buffer b at smem + b * kNPad * x_stride; offset sums' buffer b after both.
  float* xsum_buf = reinterpret_cast<float*>(smem + 2 * kNPad * x_stride);

  WPtrs wp;
  const int64_t groups = A.units_total;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Rows past m re-read row m - 1 and its scales (the scales stop at the last 16-row tile);
      // they are never stored.
      const int64_t row = min(row0 + mt * 16 + h * 8 + g, A.m - 1);
      wp.row[mt][h] = A.w + row * A.row_bytes + int64_t{u_begin} * 64 + t * 16;
      wp.sc[mt][h] = static_cast<const __nv_bfloat16*>(A.scales) + qweight_int4_scale_index(groups, row, u_begin);
    }
  WUnit st[P];
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (p < nu) load_wunit<F>(st[p], wp, p);

  pdl_wait();
  pdl_launch_dependents();

  // Phase ph stages units [ph * kc, ph * kc + kc) of the slice into buffer ph % 2.
  const int n_phases = (nu + kc - 1) / kc;
  auto stage = [&](int ph) {
    uint8_t* buf = smem + (ph % 2) * (kNPad * x_stride);
    const int u0 = ph * kc, cnt = min(kc, nu - u0);
    const int chunks = cnt * (kUnitBytes / 16);  // per row
    for (int i = threadIdx.x; i < kNPad * chunks; i += kThreads) {
      const int r = i / chunks, c = i % chunks;
      cp_async_16(buf + r * x_stride + c * 16,
                  A.xq + r * (int64_t{A.units_total} * kUnitBytes) + int64_t{u_begin + u0} * kUnitBytes + c * 16, true);
    }
    if constexpr (kOffset) {
      const int sums = cnt * kNPad / 4;  // 16-byte chunks of [cnt][kNPad] floats
      for (int i = threadIdx.x; i < sums; i += kThreads)
        cp_async_16(xsum_buf + (ph % 2) * (kc * kNPad) + i * 4, A.xsum + int64_t{u_begin + u0} * kNPad + i * 4, true);
    }
    cp_async_commit();
  };

  float acc[2][NT][4];
  zero_tiles(acc);

  if (n_phases > 0) stage(0);
  for (int ph = 0; ph < n_phases; ++ph) {
    cp_async_wait<0>();
    __syncthreads();  // phase ph's x is in; every warp is done with buffer (ph + 1) % 2
    if (ph + 1 < n_phases) stage(ph + 1);
    const uint8_t* xs = smem + (ph % 2) * (kNPad * x_stride) + g * x_stride + t * 16;
    const float* xsums = xsum_buf + (ph % 2) * (kc * kNPad) + 2 * t;
    const int u0 = ph * kc, u1 = min(nu, u0 + kc);
    // Units u0..u1-1 from the register ring: unit u sits in st[u % P].
    for (int base = u0 - u0 % P; base < u1; base += P) {
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int u = base + p;
        if (u >= u0 && u < u1) {
          mma_wunit<F, NT, kOffset>(st[p], xs + (u - u0) * kUnitBytes, x_stride, xsums + (u - u0) * kNPad, acc);
          if (u + P < nu) load_wunit<F>(st[p], wp, u + P);
        }
      }
    }
  }

  if constexpr (F == QFormat::Int8) {  // the row scales (the same factor for every slice's sum)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float sc = __ldg(static_cast<const float*>(A.scales) + min(row0 + mt * 16 + h * 8 + g, A.m - 1));
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          acc[mt][j][2 * h] *= sc;
          acc[mt][j][2 * h + 1] *= sc;
        }
      }
  }
  // Partial sums of this slice -> red [n_pad][kRedStride] (column j of out, block row r).
  __syncthreads();  // every warp is done with the x buffers that red overlays
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int r = warp * 32 + mt * 16 + g + 8 * (v / 2);
        const int col = j * 8 + 2 * t + v % 2;
        red[col * kRedStride + r] = acc[mt][j][v];
      }
  if (A.splits > 1) cg::this_cluster().sync();
  else __syncthreads();
  sum_slices_and_store<kQGemmRows, kRedStride, kQGemmMaxSplits, kThreads>(red, split, A.splits, A.n, int64_t{rb} * kQGemmRows,
                                                                       A.m, A.bias, A.out, A.accumulate);
  if (A.splits > 1) cg::this_cluster().sync();  // no block leaves while another reads its shared memory
#endif
}

// Once per kernel and GPU, as raise_smem_limit (not while a graph is being captured: a
// shape's first launch is eager).
cudaError_t allow_large_clusters(const void* kernel) {
  static std::mutex mu;
  static std::vector<std::pair<const void*, int>> done;
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& d : done)
    if (d.first == kernel && d.second == device) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (e == cudaSuccess) done.emplace_back(kernel, device);
  return e;
}

template <QFormat F, int NT, bool kOffset>
cudaError_t launch_nt(const Params& A, int splits, int64_t row_blocks, bool pdl, cudaStream_t stream) {
  auto kernel = qgemm_kernel<F, NT, kOffset>;
  const size_t smem = smem_bytes(F, NT * 8, A.kc, kOffset);
  const size_t smem_max = smem_bytes(F, NT * 8, phase_units(F, NT * 8, 1 << 20, kOffset), kOffset);
  if (const cudaError_t e = raise_smem_limit(reinterpret_cast<const void*>(kernel), static_cast<int>(smem_max));
      e != cudaSuccess)
    return e;
  if (splits > 8) {  // clusters of 9-16 blocks are "non-portable" (Hopper has them)
    if (const cudaError_t e = allow_large_clusters(reinterpret_cast<const void*>(kernel)); e != cudaSuccess) return e;
  }
  return launch_clustered(kernel, dim3(static_cast<unsigned>(splits), static_cast<unsigned>(row_blocks)), kThreads, smem,
                          static_cast<unsigned>(splits), pdl, stream, A);
}

cudaError_t launch_cut(QFormat f, const Params& A, int n_pad, bool offset, int splits, int64_t row_blocks, bool pdl,
                       cudaStream_t stream) {
  if (f == QFormat::Int8) {
    switch (n_pad) {
      case 16: return launch_nt<QFormat::Int8, 2, false>(A, splits, row_blocks, pdl, stream);
      case 32: return launch_nt<QFormat::Int8, 4, false>(A, splits, row_blocks, pdl, stream);
      default: return launch_nt<QFormat::Int8, 8, false>(A, splits, row_blocks, pdl, stream);
    }
  }
  switch (n_pad) {
    case 16:
      return offset ? launch_nt<QFormat::Int4, 2, true>(A, splits, row_blocks, pdl, stream)
                    : launch_nt<QFormat::Int4, 2, false>(A, splits, row_blocks, pdl, stream);
    case 32: return launch_nt<QFormat::Int4, 4, false>(A, splits, row_blocks, pdl, stream);
    default: return launch_nt<QFormat::Int4, 8, false>(A, splits, row_blocks, pdl, stream);
  }
}

}  // namespace

bool qgemm_available(int device) { return sm90a_kernels_run_on(device); }

bool qgemm_supported(QFormat f, int n, int64_t k, const void* x) {
  return (f == QFormat::Int4 || f == QFormat::Int8) && n >= 1 && n <= kQGemmMaxBatch && k > 0 && k % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

QGemmPlan plan_qgemm(QFormat f, int n, int64_t m, int64_t k, int sms) {
  static const int forced_splits = env_int("EMBER_CUDA_QGEMM_SPLITS");
  static const int forced_phase = env_int("EMBER_CUDA_QGEMM_PHASE");
  static const int offset_env = env_int("EMBER_CUDA_QGEMM_OFFSET");  // 1: offset sums, 2: BF16 q * scale
  const int units = static_cast<int>(qweight_k_pad(f, k) / unit_elems(f));
  const int64_t row_blocks = (m + kQGemmRows - 1) / kQGemmRows;
  const int64_t slots = int64_t{blocks_of(n_pad_of(n) / 8)} * std::max(sms, 1);  // resident blocks
  int splits = 1;
  if (forced_splits > 0) {
    splits = std::min({forced_splits, kQGemmMaxSplits, units});
  } else {
    // Time in units of one block's unit of work: each wave of resident blocks costs its units
    // plus a fixed 2.5 (x staging, the cluster sums), and each slice 0.67 more (the sums'
    // reads and the wider cluster barrier): fitted to H200 runs of the Llama-3-8B shapes at 16
    // rows (bench_cuda_kernels qgemm), where it picks the fastest measured cut or one within
    // 10% of it. At most 8 slices: 16 measured faster only for the 1024-row k / v projection.
    double best = -1;
    for (int s = 1; s <= std::min(8, units); ++s) {
      const int per = (units + s - 1) / s;
      const double cost = static_cast<double>((row_blocks * s + slots - 1) / slots) * (per + 2.5) + 0.67 * s;
      if (best < 0 || cost < best - 1e-9) {
        best = cost;
        splits = s;
      }
    }
  }
  QGemmPlan plan;
  plan.units = (units + splits - 1) / splits;
  plan.splits = (units + plan.units - 1) / plan.units;
  plan.phase = forced_phase > 0 ? forced_phase : kDefaultPhase;
  plan.offset_sums = offset_env == 0 ? kDefaultOffsetSums : offset_env == 1;
  return plan;
}

bool qgemm_exact_weights(QFormat f, const QGemmPlan& plan, int n) {
  return f == QFormat::Int8 || (plan.offset_sums && n_pad_of(n) == 16);
}

size_t qgemm_x_bytes(QFormat f, int n, int64_t k) {
  const size_t units = static_cast<size_t>(qweight_k_pad(f, k) / unit_elems(f));
  return static_cast<size_t>(n_pad_of(n)) * units * (x_unit_bytes(f) + (f == QFormat::Int4 ? 4 : 0));
}

cudaError_t launch_qgemm_stage_x(QFormat f, const float* x, int n, int64_t k, void* x_scratch, bool pdl,
                                 cudaStream_t stream) {
  if (!qgemm_supported(f, n, k, x) || reinterpret_cast<uintptr_t>(x_scratch) % 16 != 0) return cudaErrorInvalidValue;
  const int n_pad = n_pad_of(n);
  const int units_total = static_cast<int>(qweight_k_pad(f, k) / unit_elems(f));
  auto* xq = static_cast<uint8_t*>(x_scratch);
  auto* xsum = reinterpret_cast<float*>(xq + static_cast<size_t>(n_pad) * units_total * x_unit_bytes(f));
  const int64_t chunks = int64_t{n_pad} * units_total * (unit_elems(f) / 8);
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((chunks + 255) / 256, 4096));
  return launch_kernel(f == QFormat::Int4 ? qgemm_stage_x_kernel<QFormat::Int4> : qgemm_stage_x_kernel<QFormat::Int8>,
                       dim3(blocks), dim3(256), 0, stream, pdl, x, n, k, n_pad, units_total, xq, xsum);
}

cudaError_t launch_qgemm(QFormat f, const void* w, int64_t m, int64_t k, const float* x, int n, const float* bias,
                         float* out, bool accumulate, const QGemmPlan& plan, void* x_scratch, bool pdl,
                         cudaStream_t stream, bool stage_x) {
  if (!qgemm_supported(f, n, k, x) || m <= 0 || plan.splits < 1 || plan.splits > kQGemmMaxSplits || plan.units < 1 ||
      reinterpret_cast<uintptr_t>(x_scratch) % 16 != 0)
    return cudaErrorInvalidValue;
  const int n_pad = n_pad_of(n);
  const int units_total = static_cast<int>(qweight_k_pad(f, k) / unit_elems(f));
  if (!cut_covers(units_total, plan.units, plan.splits)) return cudaErrorInvalidValue;
  auto* xq = static_cast<uint8_t*>(x_scratch);
  auto* xsum = reinterpret_cast<float*>(xq + static_cast<size_t>(n_pad) * units_total * x_unit_bytes(f));
  if (stage_x) {
    const cudaError_t e = launch_qgemm_stage_x(f, x, n, k, x_scratch, pdl, stream);
    if (e != cudaSuccess) return e;
  }
  Params A;
  static_cast<PackedGemmArgs&>(A) = packed_gemm_args(f, w, m, k, n, bias, out, accumulate, plan.units, plan.splits);
  A.xq = xq;
  A.xsum = xsum;
  const bool offset = f == QFormat::Int4 && qgemm_exact_weights(f, plan, n);
  A.kc = std::min(phase_units(f, n_pad, plan.units, offset), plan.phase > 0 ? plan.phase : plan.units);
  const int64_t row_blocks = (m + kQGemmRows - 1) / kQGemmRows;
  return launch_cut(f, A, n_pad, offset, plan.splits, row_blocks, pdl, stream);
}

}  // namespace ember::cuda
