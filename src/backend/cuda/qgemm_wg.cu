// Packed int4 / int8 GEMM on wgmma for many rows of x (qgemm_wg.cuh):
//   - a block is two warpgroups; warpgroup h owns weight rows 64h..64h+63 of the block's 128
//     (warp q of it rows 16q..16q+15, lane (g, t) rows g and g + 8 as in mma.m16n8k16) and
//     multiplies them with 128 rows of x (one m64n128k16 wgmma a k step, F32 accumulators);
//   - each lane copies its 16 bytes of rows g and g + 8 per unit (the packed lane slice: 32 int4
//     or 16 int8 elements; lanes 0-1 also the warp's 16 int4 scales) into a ring in shared
//     memory by cp.async, 5 (int4) or 9 (int8) units ahead (the first issued before
//     griddepcontrol.wait), and widens them into the A fragments of the unit's k steps: int4
//     the BF16 values q * scale, int8 the F16 values q (exact; the row scale multiplies the
//     sums). The fragments of unit u are built while the wgmmas of unit u - 1 run (two sets);
//   - x was staged once per GEMM as 16-bit values in the order those fragments imply (staged
//     position p of k step s holds the element the fragments put at p: int4 lane t's element
//     4s + 2 * (p / 8) + p % 2 of its 32, int8 its element 4s + p / 8 + 2 * (p % 2) of its 16,
//     t = (p % 8) / 2), and each (128-row tile, unit) of it as the K-major 128-byte-swizzled
//     shared-memory image the wgmma B operand reads, so one thread moves a unit's x with bulk
//     copies (no per-thread address arithmetic: with cp.async by every thread, that arithmetic
//     was most of the loop's instructions, ncu). The copies fill a ring of S buffers, S - 2
//     units ahead, each completing on its mbarrier; a buffer is refilled once the wgmmas of the
//     unit before last, which read it, are waited for by both warpgroups (one block barrier a
//     unit);
//   - one k slice stores straight from the accumulators; several (while the tiles fill at most
//     half the SMs) are the blocks of one cluster, adding their sums in distributed shared
//     memory in slice order (qgemm_common.cuh, as qgemm.cu): deterministic, no workspace.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/qgemm_common.cuh"
#include "backend/cuda/qgemm_wg.cuh"
#include "backend/cuda/smem_limit.h"
#include "backend/cuda/wgmma.cuh"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

namespace ember::cuda {

namespace {

namespace cg = cooperative_groups;
using namespace qgemm_detail;

constexpr int kThreads = 256;
constexpr int unit_elems(QFormat f) { return f == QFormat::Int4 ? 128 : 64; }
constexpr int x_unit_bytes(QFormat f) { return 2 * unit_elems(f); }  // a staged row's bytes a unit
constexpr int stage_bytes(QFormat f) { return kQGemmWgTokens * x_unit_bytes(f); }
// Ring buffers: x S_x units of stage_bytes, the weights S_w units of wstage_bytes (each
// thread's 16 bytes of rows g and g + 8, and int4 each warp's 16 row scales). Deep weight rings
// because a weight load's latency, not the wgmma, set the pace when 2 units sat in registers
// (ncu: the first use of each unit's weights took 18% of the stall samples); the ring in
// shared memory took int8 10-25% faster, int4 level to 10% (H200, bench_cuda_kernels qgemm-wg).
constexpr int x_stages_of(QFormat f) { return f == QFormat::Int4 ? 5 : 8; }    // 160 / 128 KiB
constexpr int w_stages_of(QFormat f) { return f == QFormat::Int4 ? 6 : 10; }   // 50 / 80 KiB
constexpr int wstage_bytes(QFormat f) { return kThreads * 32 + (f == QFormat::Int4 ? 8 * 32 : 0); }
constexpr int kRedStride = kQGemmWgRows + 4;  // floats per partial-sum row (a column of out)
static_assert(size_t{kQGemmWgTokens} * kRedStride * 4 <= size_t{x_stages_of(QFormat::Int8)} * stage_bytes(QFormat::Int8) &&
                  size_t{kQGemmWgTokens} * kRedStride * 4 <= size_t{x_stages_of(QFormat::Int4)} * stage_bytes(QFormat::Int4),
              "the partial sums overlay the x ring");

size_t smem_bytes(QFormat f) {  // + 1024 for the alignment
  return size_t{1024} + size_t(x_stages_of(f)) * stage_bytes(f) + size_t(w_stages_of(f)) * wstage_bytes(f);
}

struct Params : PackedGemmArgs {
  const uint8_t* xq = nullptr;  // [n_pad / 128][units_total][stage_bytes]: shared-memory images of x
};

// A lane's share of one unit: 16 bytes of rows g and g + 8, and (int4) their group scales.
struct WRaw {
  uint4 lo, hi;
  uint32_t s_lo, s_hi;
};

// The A fragments of a unit's k steps from a lane's raw share (k step s: int4 word s / 2,
// nibble pairs 2 (s % 2) and 2 (s % 2) + 1; int8 word s, bytes 0, 2 and 1, 3).
template <QFormat F>
__device__ __forceinline__ void widen(const WRaw& r, uint32_t (&a)[unit_elems(F) / 16][4]) {
  if constexpr (F == QFormat::Int4) {
    const __nv_bfloat16 sl = __ushort_as_bfloat16(static_cast<unsigned short>(r.s_lo));
    const __nv_bfloat16 sh = __ushort_as_bfloat16(static_cast<unsigned short>(r.s_hi));
    const __nv_bfloat162 sl2 = __halves2bfloat162(sl, sl), sh2 = __halves2bfloat162(sh, sh);
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const uint32_t lo = (&r.lo.x)[s / 2], hi = (&r.hi.x)[s / 2];
      const int p = 2 * (s % 2);
      a[s][0] = i4_scaled(lo, p, sl2);
      a[s][1] = i4_scaled(hi, p, sh2);
      a[s][2] = i4_scaled(lo, p + 1, sl2);
      a[s][3] = i4_scaled(hi, p + 1, sh2);
    }
  } else {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint32_t lo = (&r.lo.x)[s], hi = (&r.hi.x)[s];
      a[s][0] = i8x2_to_f16x2<0x4240>(lo);
      a[s][1] = i8x2_to_f16x2<0x4240>(hi);
      a[s][2] = i8x2_to_f16x2<0x4341>(lo);
      a[s][3] = i8x2_to_f16x2<0x4341>(hi);
    }
  }
}

// x [n, k] F32 -> xq: for each 128-row tile of x and unit, the unit's x as its shared-memory
// image (stage_bytes: [column block][128 rows][128 bytes], 128-byte swizzle), 16-bit (BF16 int4,
// F16 int8) in fragment order (file comment), zero past n and k. One thread a 16-byte chunk:
// chunk c of a row's unit is k step c / 2, positions 8 (c % 2) .. + 7, i.e. lanes t = 0..3, two
// elements each.
template <QFormat F>
__global__ void __launch_bounds__(256) qgemm_wg_stage_x_kernel(const float* x, int n, int64_t k, int64_t n_pad,
                                                               int units, uint8_t* xq) {
  pdl_wait();
  pdl_launch_dependents();
  using T = std::conditional_t<F == QFormat::Int4, __nv_bfloat16, __half>;
  constexpr int kChunks = x_unit_bytes(F) / 16;
  const int64_t per_row = int64_t{units} * kChunks;
  const int64_t total = n_pad * per_row;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < total; q += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = q / per_row, cc = q % per_row;
    const int64_t u = cc / kChunks;
    const int c = static_cast<int>(cc % kChunks), s = c / 2, hi = c % 2;
    const int64_t base = u * unit_elems(F);
    float v[8];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      if constexpr (F == QFormat::Int4) {
        const int64_t o = base + t * 32 + 4 * s + 2 * hi;
        const float2 f = row < n && o < k ? __ldg(reinterpret_cast<const float2*>(x + row * k + o)) : make_float2(0.f, 0.f);
        v[2 * t] = f.x;
        v[2 * t + 1] = f.y;
      } else {
        const int64_t o = base + t * 16 + 4 * s;
        const float4 f = row < n && o < k ? __ldg(reinterpret_cast<const float4*>(x + row * k + o))
                                          : make_float4(0.f, 0.f, 0.f, 0.f);
        v[2 * t] = hi ? f.y : f.x;
        v[2 * t + 1] = hi ? f.w : f.z;
      }
    }
    const uint4 o = make_uint4(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]), pack2<T>(v[4], v[5]), pack2<T>(v[6], v[7]));
    const int64_t image = (row / kQGemmWgTokens) * units + u;
    *reinterpret_cast<uint4*>(xq + image * stage_bytes(F) +
                              wg::swizzled_offset(kQGemmWgTokens, static_cast<int>(row % kQGemmWgTokens), c)) = o;
  }
}

template <QFormat F>
__global__ void __launch_bounds__(kThreads, 1) qgemm_wg_kernel(const Params A) {
#if defined(EMBER_WGMMA_DEVICE)
  using T = std::conditional_t<F == QFormat::Int4, __nv_bfloat16, __half>;
  constexpr int kSteps = unit_elems(F) / 16;
  constexpr int kStage = stage_bytes(F);
  constexpr int SX = x_stages_of(F), SW = w_stages_of(F);
  constexpr int kWStage = wstage_bytes(F);
  constexpr int kNt = kQGemmWgTokens / 8;
  extern __shared__ uint8_t smem_raw[];
  // The swizzle's 8-row period must start on a 1024-byte boundary.
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* wring = smem + SX * kStage;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wgi = warp / 4, wq = warp % 4, g = lane / 4, t = lane % 4;
  const int split = blockIdx.x, rb = blockIdx.y;
  const int64_t tok0 = int64_t{blockIdx.z} * kQGemmWgTokens;
  const int u_begin = split * A.units;
  const int nu = max(0, min(A.units, A.units_total - u_begin));
  const int64_t row_lo = int64_t{rb} * kQGemmWgRows + wgi * 64 + wq * 16 + g;

  // Rows past m re-read row m - 1 (and the last 16-row scale tile); their sums are never stored.
  const int64_t r_lo = min(row_lo, A.m - 1), r_hi = min(row_lo + 8, A.m - 1);
  const uint8_t* w_lo = A.w + r_lo * A.row_bytes + int64_t{u_begin} * 64 + t * 16;
  const uint8_t* w_hi = A.w + r_hi * A.row_bytes + int64_t{u_begin} * 64 + t * 16;
  const int64_t scale_tile = min(int64_t{rb} * kQGemmWgRows + wgi * 64 + wq * 16, A.m - 1) / 16;
  const uint8_t* s_tile = static_cast<const uint8_t*>(A.scales) +
                          qweight_int4_scale_index(A.units_total, scale_tile * 16, u_begin) * 2 + lane * 16;
  // Unit u's weights -> this thread's slot of ring buffer u % SW (lanes 0-1 of a warp: its 16 scales).
  auto load_w = [&](int u) {
    if (u < nu) {
      uint8_t* slot = wring + (u % SW) * kWStage;
      cp_async_16(slot + tid * 32, w_lo + int64_t{u} * 64, true);
      cp_async_16(slot + tid * 32 + 16, w_hi + int64_t{u} * 64, true);
      if (F == QFormat::Int4 && lane < 2) cp_async_16(slot + kThreads * 32 + warp * 32 + lane * 16, s_tile + int64_t{u} * 32, true);
    }
    cp_async_commit();  // (empty past the slice: the group count stays uniform)
  };
#pragma unroll
  for (int u = 0; u < SW - 1; ++u) load_w(u);

  pdl_wait();
  pdl_launch_dependents();

  // Unit u's x -> ring buffer u % SX, completing on full[u % SX] (phase (u / SX) % 2).
  __shared__ __align__(8) uint64_t full[SX];
  const uint32_t ring = smem_addr(smem), full0 = smem_addr(&full[0]);
  const uint8_t* xsrc = A.xq + (int64_t{blockIdx.z} * A.units_total + u_begin) * kStage;
  auto stage_x = [&](int u) {  // (thread 0)
    if (u >= nu) return;
    const uint32_t bar = full0 + (u % SX) * 8;
    wg::mbar_expect_tx(bar, kStage);
    constexpr int kPiece = 16384;  // (a column block of int4, the whole int8 unit)
#pragma unroll
    for (int b = 0; b < kStage / kPiece; ++b)
      wg::bulk_copy_g2s(ring + (u % SX) * kStage + b * kPiece, xsrc + int64_t{u} * kStage + b * kPiece, kPiece, bar);
  };
  if (tid == 0) {
#pragma unroll
    for (int i = 0; i < SX; ++i) wg::mbar_init(full0 + i * 8, 1);
    wg::fence_mbar_init();
  }
  __syncthreads();
  if (tid == 0) {
#pragma unroll
    for (int u = 0; u < SX - 2; ++u) stage_x(u);
  }

  float acc[kNt][4];
#pragma unroll
  for (int j = 0; j < kNt; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  uint32_t a[2][kSteps][4];
  const uint64_t d0 = wg::desc(ring, 16, wg::kAtomBytes);

  for (int base = 0; base < nu; base += 2) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int u = base + p;
      if (u < nu) {  // (uniform over the block)
        cp_async_wait<SW - 2>();  // this thread's copies of unit u's weights have landed
        __syncwarp();             // ... and its warp's (the scales)
        {
          const uint8_t* slot = wring + (u % SW) * kWStage;
          WRaw r;
          r.lo = *reinterpret_cast<const uint4*>(slot + tid * 32);
          r.hi = *reinterpret_cast<const uint4*>(slot + tid * 32 + 16);
          if constexpr (F == QFormat::Int4) {
            const auto* sc = reinterpret_cast<const unsigned short*>(slot + kThreads * 32 + warp * 32);
            r.s_lo = sc[g];
            r.s_hi = sc[g + 8];
          }
          widen<F>(r, a[p]);  // (unit u - 2 was the last to read this set: waited for)
        }
        __syncwarp();  // the warp's reads of this buffer are done before unit u + SW - 1 refills the one before
        load_w(u + SW - 1);
        __syncthreads();  // units <= u - 2 are waited for in both warpgroups: their x buffers are free
        if (tid == 0) stage_x(u + SX - 2);  // into the buffer of unit u - 2
        wg::mbar_wait(full0 + (u % SX) * 8, (u / SX) & 1);
        wg::fence();
        const uint64_t ds = wg::desc_add(d0, static_cast<uint32_t>((u % SX) * kStage));
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
          wg::mma_rs_kmajor<T, kQGemmWgTokens>(
              acc, a[p][s], wg::desc_add(ds, (s / 4) * kQGemmWgTokens * wg::kSwizzleBytes + (s % 4) * 32));
        wg::commit();
        wg::wait<1>();  // unit u - 1's wgmmas are done: its fragment set is free
        wg::fence_operands(a[1 - p]);
      }
    }
  }
  wg::wait<0>();
  wg::fence_operands(acc);
  wg::fence_operands(a[0]);
  wg::fence_operands(a[1]);

  if constexpr (F == QFormat::Int8) {  // the row scales (the same factor for every slice's sum)
    const float sl = __ldg(static_cast<const float*>(A.scales) + r_lo);
    const float sh = __ldg(static_cast<const float*>(A.scales) + r_hi);
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
      acc[j][0] *= sl;
      acc[j][1] *= sl;
      acc[j][2] *= sh;
      acc[j][3] *= sh;
    }
  }
  cp_async_wait<0>();  // (only empty groups are left)
  if (A.splits == 1) {
    // One slice: straight from the accumulators (lanes g of a store: 8 consecutive rows).
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int64_t row = row_lo + 8 * (v / 2);
      if (row >= A.m) continue;
      const float b = A.bias ? A.bias[row] : 0.0f;
#pragma unroll
      for (int j = 0; j < kNt; ++j) {
        const int64_t tok = tok0 + j * 8 + 2 * t + v % 2;
        if (tok >= A.n) continue;
        const float y = acc[j][v] + b;
        float* o = A.out + tok * A.m + row;
        *o = A.accumulate ? *o + y : y;
      }
    }
    return;
  }
  // Partial sums of this slice -> red [tokens][kRedStride] (column of out, block row).
  __syncthreads();  // every thread is done with the x ring that red overlays (each bulk copy was waited for)
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int j = 0; j < kNt; ++j)
#pragma unroll
    for (int v = 0; v < 4; ++v)
      red[(j * 8 + 2 * t + v % 2) * kRedStride + wgi * 64 + wq * 16 + g + 8 * (v / 2)] = acc[j][v];
  cg::this_cluster().sync();
  sum_slices_and_store<kQGemmWgRows, kRedStride, kQGemmWgMaxSplits, kThreads>(
      red, split, A.splits, static_cast<int>(min(int64_t{kQGemmWgTokens}, A.n - tok0)), int64_t{rb} * kQGemmWgRows, A.m,
      A.bias, A.out + tok0 * A.m, A.accumulate);
  cg::this_cluster().sync();  // no block leaves while another reads its shared memory
#endif
}

int64_t n_pad_of(int n) { return (int64_t{n} + kQGemmWgTokens - 1) / kQGemmWgTokens * kQGemmWgTokens; }

}  // namespace

bool qgemm_wg_available(int device) { return sm90a_kernels_run_on(device); }

bool qgemm_wg_supported(QFormat f, int n, int64_t k, const void* x) {
  return (f == QFormat::Int4 || f == QFormat::Int8) && n >= 1 && k > 0 && k % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

QGemmWgPlan plan_qgemm_wg(QFormat f, int n, int64_t m, int64_t k, int sms) {
  static const int forced = env_int("EMBER_CUDA_QGEMM_WG_SPLITS");
  const int units = static_cast<int>(qweight_k_pad(f, k) / unit_elems(f));
  const int64_t tiles = (m + kQGemmWgRows - 1) / kQGemmWgRows * (n_pad_of(n) / kQGemmWgTokens);
  int splits = 1;
  if (forced > 0) {
    splits = std::min({forced, kQGemmWgMaxSplits, units});
  } else if (tiles * 8 <= sms) {
    splits = 4;
  } else if (tiles * 2 <= sms) {
    // Two slices while the tiles fill at most half the SMs: a block's fixed cost (the rings'
    // fill, the cluster's sums) is several units' worth, so more slices lose (H200, int4 at
    // 128 / 256 rows: 4096 x 4096 21.6 us at 2 slices against 27.9 at 4 and 34.2 at 1;
    // 4096 x 14336 55.4 against 61.6 / 100.4; at 96+ tiles one slice wins).
    splits = 2;
  }
  splits = std::min(splits, units);
  QGemmWgPlan plan;
  plan.units = (units + splits - 1) / splits;
  plan.splits = (units + plan.units - 1) / plan.units;
  return plan;
}

size_t qgemm_wg_x_bytes(QFormat f, int n, int64_t k) {
  return static_cast<size_t>(n_pad_of(n)) * static_cast<size_t>(qweight_k_pad(f, k)) * 2;
}

cudaError_t launch_qgemm_wg_stage_x(QFormat f, const float* x, int n, int64_t k, void* x_scratch, bool pdl,
                                    cudaStream_t stream) {
  if (!qgemm_wg_supported(f, n, k, x) || reinterpret_cast<uintptr_t>(x_scratch) % 16 != 0) return cudaErrorInvalidValue;
  const int units = static_cast<int>(qweight_k_pad(f, k) / unit_elems(f));
  const int64_t chunks = n_pad_of(n) * units * (x_unit_bytes(f) / 16);
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((chunks + 255) / 256, 8192));
  return launch_kernel(f == QFormat::Int4 ? qgemm_wg_stage_x_kernel<QFormat::Int4> : qgemm_wg_stage_x_kernel<QFormat::Int8>,
                       dim3(blocks), dim3(256), 0, stream, pdl, x, n, k, n_pad_of(n), units,
                       static_cast<uint8_t*>(x_scratch));
}

cudaError_t launch_qgemm_wg(QFormat f, const void* w, int64_t m, int64_t k, const float* x, int n, const float* bias,
                            float* out, bool accumulate, const QGemmWgPlan& plan, void* x_scratch, bool pdl,
                            cudaStream_t stream, bool stage_x) {
  if (!qgemm_wg_supported(f, n, k, x) || m <= 0 || plan.splits < 1 || plan.splits > kQGemmWgMaxSplits ||
      plan.units < 1 || reinterpret_cast<uintptr_t>(x_scratch) % 16 != 0)
    return cudaErrorInvalidValue;
  const int units_total = static_cast<int>(qweight_k_pad(f, k) / unit_elems(f));
  if (!cut_covers(units_total, plan.units, plan.splits)) return cudaErrorInvalidValue;
  const int64_t row_blocks = (m + kQGemmWgRows - 1) / kQGemmWgRows;
  const int64_t tok_tiles = n_pad_of(n) / kQGemmWgTokens;
  if (row_blocks > 65535 || tok_tiles > 65535) return cudaErrorInvalidValue;
  if (stage_x) {
    const cudaError_t e = launch_qgemm_wg_stage_x(f, x, n, k, x_scratch, pdl, stream);
    if (e != cudaSuccess) return e;
  }
  Params A;
  static_cast<PackedGemmArgs&>(A) = packed_gemm_args(f, w, m, k, n, bias, out, accumulate, plan.units, plan.splits);
  A.xq = static_cast<const uint8_t*>(x_scratch);
  auto kernel = f == QFormat::Int4 ? qgemm_wg_kernel<QFormat::Int4> : qgemm_wg_kernel<QFormat::Int8>;
  const size_t smem = smem_bytes(f);
  if (const cudaError_t e = raise_smem_limit(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));
      e != cudaSuccess)
    return e;
  return launch_clustered(kernel,
                          dim3(static_cast<unsigned>(plan.splits), static_cast<unsigned>(row_blocks),
                               static_cast<unsigned>(tok_tiles)),
                          kThreads, smem, static_cast<unsigned>(plan.splits), pdl, stream, A);
}

}  // namespace ember::cuda
