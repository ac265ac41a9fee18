// Packed int4 / FP8 / int8 GEMV with x staged in shared memory (the "staged" path of qgemv.cuh),
// for batches of 1-8 rows whose BF16 (int8: F16) copy of x fits (qgemv_staged_fits).
//
// Same work split as the direct kernel (qgemv.cu): a block of 8 warps owns a tile of 16 weight
// rows (GLU: 16 rows of gate and of up), warp w takes the 64-byte units w, w + 8, ... of those
// rows (a unit is 128 elements for int4 = one scale group, 64 for fp8 / int8), lane (g, t) =
// (lane / 4, lane % 4) reading 16 bytes of rows g and g + 8, dequantized in registers into
// mma.m16n8k16 A fragments whose k order is the lane's own slice. What differs, to cut the
// instructions per weight and keep more bytes in flight:
//   - the weights go through a cp.async ring of lane-private shared-memory slots (8 units a
//     warp, 4 for gate/up), each lane reading back only the bytes it copied (no barrier); int4
//     scales ride in the same slots (the tile's 16 of the unit, copied by lanes 0 and 1, read by
//     all after a __syncwarp), so no plain global load waits inside the loop;
//   - x is converted once per block (after griddepcontrol.wait) to BF16 in shared memory, laid
//     out so that a lane's B fragments for a unit are 2-4 conflict-free 16-byte loads (the
//     slice of lane t at j * 64 + t * 16 of the unit); batch rows >= n read a zero block. Each
//     warp converts only the units it multiplies (stage_x_warp), so no block barrier stands
//     between a warp's x and its first weights. The staging is a template parameter
//     (XStage): each kernel holds only the path it runs (see the kernel).
//   - the grid is persistent (at most the resident blocks; a block loops over tiles with
//     stride gridDim.x), so x is staged once per block, and the loads of the next tile's
//     first units are issued before the current tile's reduction.
//   - where all of x does not fit beside the ring at two blocks an SM (2-8 rows), the blocks of
//     a cluster split each tile's units: each stages only its slice of x, and the tile's owner
//     (a rank by turns) adds the blocks' sums through distributed shared memory.
//   - int4: (w >> 4p) & 0x000f000f | 0x43004300 is BF16 128 + nibble = 136 + q; no subtraction
//     per element: the mma sums (136 + q) x and the epilogue of each unit takes 136 * (sum of
//     the unit's BF16 x), computed while staging, off before applying the group scale.
//   - fp8: bytes 0 and 2 / 1 and 3 of a word become BF16 pairs (sign to bit 15, exponent and
//     mantissa to bits 4-10: the value times 2^-120) with two shifts and two masks; x is staged
//     times 2^60 (same BF16 rounding) so products stay normal, and the row scale takes 2^60.
//     The staged x of each 4 elements is ordered (0, 2, 1, 3) to match. (e4m3 subnormals,
//     |w| < row max / 28672, become BF16 subnormals; the tests cannot tell whether the mma
//     keeps or flushes them.)
//   - int8: fp8's path with F16 operands: bytes 0 and 2 / 1 and 3 of a word under 0x64 are F16
//     1152 + q, minus 1152 is q exactly (i8x2_to_f16x2); x staged as F16 (unscaled) in fp8's
//     order; the row scale in the epilogue.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gpu_kind.h"
#include "backend/cuda/hold_gate.cuh"
#include "backend/cuda/l2_prefetch.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/norm_stage.cuh"
#include "backend/cuda/qgemv.cuh"
#include "backend/cuda/qgemm_common.cuh"
#include "backend/cuda/probe.cuh"
#include "backend/cuda/rope_epilogue.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma.cuh"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

namespace ember::cuda {

namespace {

constexpr int kWarps = 8;
// Units in flight per warp (R): 8, or 4 for a plain int4 GEMV whose x is too large for the
// 8-unit ring where the 4-unit ring still gives two blocks an SM (plan_staged), and for an int4
// GEMV of one batch row at k <= 4096 (launch_qgemv_staged: three blocks an SM). Each unit is
// 1 KiB of weights (32 lanes x 2 rows x 16 bytes) per stream, copied by cp.async into a ring of
// lane-private shared-memory slots, and for int4 the unit's 16 group scales of the tile (32
// bytes a stream, copied by lanes 0 and 1, read by all after a __syncwarp): R = 8 takes 64 KiB
// a block, int4 66 KiB. Stages: ring slots of S streams each.
template <int S, int R>
constexpr int stages() { return R / S; }
constexpr int kScaleBytes = 32;  // int4: one unit's scales of a 16-row tile
constexpr int unit_bytes(QFormat f) { return 1024 + (f == QFormat::Int4 ? kScaleBytes : 0); }
template <QFormat F, int S>
constexpr int slot_bytes() { return S * unit_bytes(F); }
constexpr size_t ring_bytes(QFormat f, int r) { return size_t{kWarps} * r * unit_bytes(f); }
constexpr int kZeroBytes = 256;  // zero B fragments for batch rows >= n
// Dynamic shared memory the 8-unit ring may take (one block an SM at the top of the range).
constexpr size_t max_smem(QFormat f) { return ring_bytes(f, 8) + 64 * 1024; }
constexpr int kMaxCluster = 8;  // blocks of a cluster that split a tile's units (k)
// The kernel's static shared memory for S streams (reduction buffers `red`, the norm's sums in
// the staging), and the dynamic shared memory under which two of its blocks fit an H100 / H200 SM
// (228 KiB, 1 KiB reserved a block).
constexpr size_t static_smem(int S) {
  return size_t{2} * kWarps * 32 * 16 * S + (kXNormMaxRows * 32 + kXNormMaxRows) * 4;
}
constexpr size_t two_block_smem(int S) { return (228 * 1024) / 2 - 1024 - static_smem(S); }
constexpr size_t kPlainTwoBlockSmem = two_block_smem(1);
// A cluster block's sums of its tile (summed over its warps), [2][128][S] floats, double
// buffered: read by the tile's owner block through distributed shared memory.
constexpr size_t csum_bytes(int S) { return size_t{2} * 128 * 4 * S; }

struct SArgs : QGemvProblem {
  int n_chunks = 0;  // pipeline rounds (kWarps * stages units) per tile
  int x_stride = 0;  // bytes of one staged x row
  // With QGemvProblem::cluster set to the plan's blocks a tile (1, 2, 4, 8): block rank r takes
  // the tile's units [r * units_local, (r + 1) * units_local) and stages only that slice of x;
  // the cluster's sums meet in distributed shared memory (csum_bytes after the int4 x sums).
  int units_local = 0;
};

// The rope epilogue's kernels (kRope) take the rope's arguments too; the others keep SArgs alone
// (launch arguments a kernel does not use have cost batch-1 speed before: session 29).
struct SArgsRope : SArgs {
  GemvRope rope;
};
// Likewise the kernels that prefetch the next GEMV's weights into L2 (kNext).
struct SArgsNext : SArgs {
  L2Prefetch next;
};
// Likewise the kernels that wait at a decode attention's start gate (kGate; hold_gate.cuh).
struct SArgsGate : SArgs {
  uint32_t* gate;
  int gate_arrivals;
};
template <bool kRope, bool kNext = false, bool kGate = false>
using KernelArgs = std::conditional_t<kRope, SArgsRope,
                                      std::conditional_t<kNext, SArgsNext, std::conditional_t<kGate, SArgsGate, SArgs>>>;
// The TMA ring's kernels (kTma, EMBER_CUDA_QGEMV_TMA): the same arguments and a tensor map a
// weight matrix (a segment's; GLU: gate, up), boxes of 64 bytes x 8 rows.
template <class Base>
struct WithMaps : Base {
  CUtensorMap maps[kQGemvMaxSegs];
};
template <bool kRope, bool kNext, bool kGate, bool kTma>
using KArgs = std::conditional_t<kTma, WithMaps<KernelArgs<kRope, kNext, kGate>>, KernelArgs<kRope, kNext, kGate>>;

// How the staged kernel stages x: Plain (no norm: stage_x_warp, 4 chunks a lane in flight),
// Norm (the folded norm: rms_inverse_rows, then stage_x_warp with 2), NormOne (the folded norm
// at one batch row and k <= 4096, no cluster: stage_x_norm_one).
enum class XStage { Plain, Norm, NormOne };

int units_of(QFormat f, int64_t k) { return static_cast<int>(qweight_k_pad(f, k) / qformat_unit(f)); }
int units_per_rank(QFormat f, int64_t k, int c) { return (units_of(f, k) + c - 1) / c; }
int staged_x_stride(QFormat f, int units) {
  return static_cast<int>(units * qformat_unit(f) * 2 + 64);  // +64: rows g, g + 1 on other banks
}
// The ring, then x (see stage_x_warp), the zero block, int4's x sums, and a cluster's sums.
size_t staged_smem(QFormat f, int r, int n, int64_t k, int c = 1, int S = 1) {
  const int units = units_per_rank(f, k, c);
  return ring_bytes(f, r) + static_cast<size_t>(n) * staged_x_stride(f, units) + kZeroBytes +
         (f == QFormat::Int4 ? static_cast<size_t>(units) * 8 * 4 : 0) + (c > 1 ? csum_bytes(S) : 0);
}

// Whether this GPU runs the cluster split (sm_90a; cached per device) and
// EMBER_CUDA_QGEMV_CLUSTER is not 0.
bool clusters_allowed() {
  static const bool env_off = [] {
    const char* e = std::getenv("EMBER_CUDA_QGEMV_CLUSTER");
    return e != nullptr && std::strcmp(e, "0") == 0;
  }();
  if (env_off) return false;
  static std::mutex mu;
  static int known[64] = {};  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  std::lock_guard<std::mutex> lock(mu);
  if (known[dev] == 0) known[dev] = sm90a_kernels_run_on(dev) ? 1 : 2;
  return known[dev] == 1;
}

struct StagedPlan {
  int ring = 0;     // units a warp's ring holds (8 or 4); 0: the staged kernel does not take it
  int cluster = 1;  // blocks that split each tile's units
};

// Where a problem fits (glu: gate/up + GLU; plain: no GLU and no norm folded), first match:
//  1. the 8-unit ring and all of x at two blocks an SM (every batch-1 GEMV of Llama-3-8B);
//  2. the 8-unit ring at one block an SM, or for a plain int4 GEMV the 4-unit ring at two;
//  3. where those leave only the direct kernel (k 14336 from 3-4 rows, k 4096 at 8 rows for
//     fp8 / int8), the 8-unit ring over a cluster of 2, 4 or 8 blocks that split k, each
//     staging its slice of x, at two blocks an SM. Not fp8 / int8 gate/up + GLU, where the
//     direct kernel was faster.
// H200, us at 8 rows, direct | cluster (session 23 call 1, EMBER_CUDA_QGEMV_CLUSTER=0 | 1 in
// one binary): int4 gate/up + GLU 54.3 | 40.8, down 37.9 | 27.8 (3 rows 19.4 | 18.6; at 6-8
// rows the packed GEMM takes it: gemm_over_direct_gemv); fp8 q/o 13.4 | 10.0, q/k/v 14.3 |
// 13.2, down 37.4 | 29.4 (3 rows 33.2 | 23.8), lm_head 245 | 201; int8 q/o 12.3 | 9.6, down
// 34.6 | 29.5 (3 rows 29.0 | 24.7), lm_head 224 | 204. Left out (session 22 call 2): int4's
// 4-unit ring over a cluster (lm_head 86.5 | 167.5, q/k/v 10.8 | 12.3), fp8 / int8 gate/up +
// GLU (direct 43.0 | 48.6).
// force_cluster: 0 the above (no cluster without sm_90a or with EMBER_CUDA_QGEMV_CLUSTER=0);
// 1 never a cluster; 2, 4, 8 that cluster wherever its slice fits the 8-unit ring (tests).
StagedPlan plan_staged(QFormat f, bool glu, bool plain, int n, int64_t k, int force_cluster = 0) {
  if (n < 1 || n > kQGemvMaxBatch) return {};
  const int S = glu ? 2 : 1;
  const int units = units_of(f, k);
  auto covers = [&](int c) { return c <= units && qgemm_detail::cut_covers(units, units_per_rank(f, k, c), c); };
  if (force_cluster > 1) {
    if (clusters_allowed() && force_cluster <= kMaxCluster && covers(force_cluster) &&
        staged_smem(f, 8, n, k, force_cluster, S) <= max_smem(f))
      return {8, force_cluster};
    return {};
  }
  if (staged_smem(f, 8, n, k) <= max_smem(f)) return {8, 1};
  // Batches of 8 rows at k 4096 (q/k/v, o, lm_head) take this ring for int4: its direct kernel
  // runs at 550-800 GB/s there (8 x 128/256 decode +7-13% end to end, H200, session 11). Not
  // fp8 / int8 (their direct kernel was faster at 8 rows), not with the norm folded (every block
  // would read all of x twice: fp8 lost 16%).
  if (plain && f == QFormat::Int4 && staged_smem(f, 4, n, k) <= kPlainTwoBlockSmem) return {4, 1};
  if (force_cluster == 0 && clusters_allowed() && !(glu && f != QFormat::Int4))
    for (int c = 2; c <= kMaxCluster; c *= 2)
      if (covers(c) && staged_smem(f, 8, n, k, c, S) <= two_block_smem(S)) return {8, c};
  return {};
}

// 16 bytes of weights global -> shared (L2 only, evict-first: l2_weights_policy), one group per
// ring slot.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "l"(l2_weights_policy())
               : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// e4m3 bytes 0, 2 (p02) and 1, 3 (p13) of w -> BF16 pairs of value * 2^-120.
__device__ __forceinline__ uint32_t fp8_p02(uint32_t w) {
  return ((w << 4) & 0x07f007f0u) | ((w << 8) & 0x80008000u);
}
__device__ __forceinline__ uint32_t fp8_p13(uint32_t w) {
  return ((w >> 4) & 0x07f007f0u) | (w & 0x80008000u);
}

template <QFormat F>
struct SFmt;
template <>
struct SFmt<QFormat::Int4> {
  static constexpr int kUnit = 128;  // elements per unit
  static constexpr int kXVec = 4;    // 16-byte B loads per lane and unit
};
template <>
struct SFmt<QFormat::Fp8> {
  static constexpr int kUnit = 64;
  static constexpr int kXVec = 2;
  using T = __nv_bfloat16;                                  // mma operands (x staged as T)
  static constexpr float kXScale = 1152921504606846976.0f;    // x staged times 2^60 ...
  static constexpr float kSumScale = 1152921504606846976.0f;  // ... so the sums (value * 2^-60) take 2^60
  // Bytes 0, 2 (p02) and 1, 3 (p13) of a weight word as T pairs.
  __device__ static uint32_t p02(uint32_t w) { return fp8_p02(w); }
  __device__ static uint32_t p13(uint32_t w) { return fp8_p13(w); }
};
template <>
struct SFmt<QFormat::Int8> {
  static constexpr int kUnit = 64;
  static constexpr int kXVec = 2;
  using T = __half;
  static constexpr float kXScale = 1.0f;
  static constexpr float kSumScale = 1.0f;
  __device__ static uint32_t p02(uint32_t w) { return i8x2_to_f16x2<0x4240>(w); }
  __device__ static uint32_t p13(uint32_t w) { return i8x2_to_f16x2<0x4341>(w); }
};

// Load pointers of one tile: rows g and g + 8 (clamped to m - 1) of each stream.
template <int S>
struct TilePtrs {
  const uint8_t* lo[S];
  const uint8_t* hi[S];
  const uint8_t* sc[S];  // int4: the tile's scales of this warp's first unit, + lane * 16 (lanes 0, 1 copy)
};

// Segment of a tile, selected with constant indices (A stays in parameter space).
struct Seg {
  const uint8_t* w;
  const void* sc;
  const float* bias;
  float* out;
  int64_t m;
  int t0;
  bool accumulate;
};
template <bool kGlu>
__device__ __forceinline__ Seg seg_of(const SArgs& A, int tile) {
  Seg s{A.w[0], A.scales[0], A.bias[0], A.out[0], A.m[0], 0, A.accumulate[0]};
#pragma unroll
  for (int i = 1; i < kQGemvMaxSegs; ++i) {
    if (!kGlu && i < A.n_segs && tile >= A.tile_end[i - 1])
      s = Seg{A.w[i], A.scales[i], A.bias[i], A.out[i], A.m[i], A.tile_end[i - 1], A.accumulate[i]};
  }
  return s;
}

// The output element an epilogue thread (threadIdx.x < 128) finishes in a tile: its segment,
// row and batch column, and whether it lies inside both.
struct TileOut {
  Seg sg;
  int64_t row;
  int col;
  bool inside;
};
// The rope epilogue's q / k / v GEMV (kRope, segments 0 q, 1 k, 2 v): which segment a tile is in.
__device__ __forceinline__ int seg_index(const SArgs& A, int tile) {
  return tile < A.tile_end[0] ? 0 : tile < A.tile_end[1] ? 1 : 2;
}
// Row r (0..15) of a segment's tile tl with the rope epilogue: 16 consecutive rows in v, and in q
// and k (segment index si < 2) rows 8j + r and D/2 + 8j + r - 8 of head tl / (D / 16), j = tl % (D /
// 16): rows r and r + 8 of the tile are then one rotated (neox) pair, and the pair meets in
// epilogue threads x and x ^ 2.
__device__ __forceinline__ int64_t rope_tile_row(const GemvRope& rp, int si, int tl, int r) {
  if (si < 2) {
    const int per_head = rp.head_dim / 16;
    return static_cast<int64_t>(tl / per_head) * rp.head_dim + 8 * (tl % per_head) + (r & 7) +
           (r >= 8 ? rp.head_dim / 2 : 0);
  }
  return static_cast<int64_t>(tl) * 16 + r;
}

template <bool kGlu, bool kRope = false, typename Args>
__device__ __forceinline__ TileOut tile_out(const Args& A, int tile, int64_t red_row, int red_col) {
  const Seg sg = seg_of<kGlu>(A, tile);
  int64_t row;
  if constexpr (kRope) row = rope_tile_row(A.rope, seg_index(A, tile), tile - sg.t0, static_cast<int>(red_row));
  else row = static_cast<int64_t>(tile - sg.t0) * 16 + red_row;
  return TileOut{sg, row, red_col, row < sg.m && red_col < A.n};
}

// (pointing at this warp's first unit of the block's slice, which starts at unit u_off; lane t's
// 16 bytes)
// kTwin: S streams of one matrix, tile = S x 16 consecutive rows (stream s: rows 16 s..16 s + 15),
// whose int4 scales past the matrix's last 16-row tile read that tile's (their rows are not stored).
template <int S, bool kRope = false, bool kTwin = false, typename Args>
__device__ __forceinline__ void tile_ptrs(const Args& A, int tile, int g, int t, int warp, int u_off, TilePtrs<S>& p) {
  const Seg sg = seg_of<S == 2 && !kTwin>(A, tile);
  if constexpr (kRope) {  // (S == 1; int4: lanes 0 and 1 copy the scales of rows 0..7 and 8..15 of the tile)
    const int si = seg_index(A, tile), tl = tile - sg.t0;
    const int64_t r_lo = min(rope_tile_row(A.rope, si, tl, g), sg.m - 1);
    const int64_t r_hi = min(rope_tile_row(A.rope, si, tl, g + 8), sg.m - 1);
    p.lo[0] = sg.w + r_lo * A.row_bytes + (u_off + warp) * 64 + t * 16;
    p.hi[0] = sg.w + r_hi * A.row_bytes + (u_off + warp) * 64 + t * 16;
    p.sc[0] = static_cast<const uint8_t*>(sg.sc) +
              2 * qweight_int4_scale_index(A.n_units, rope_tile_row(A.rope, si, tl, g == 0 && t < 2 ? 8 * t : 0),
                                           u_off + warp);
    return;
  }
  const int64_t row0 = static_cast<int64_t>(tile - sg.t0) * (kTwin ? 16 * S : 16);
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const int64_t rs = kTwin ? row0 + 16 * s : row0;
    const int64_t r_lo = min(rs + g, sg.m - 1), r_hi = min(rs + g + 8, sg.m - 1);
    const int64_t r_sc = kTwin ? min(rs, (sg.m - 1) / 16 * 16) : rs;
    const uint8_t* w = s == 0 || kTwin ? sg.w : A.w[1];
    const void* sc = s == 0 || kTwin ? sg.sc : A.scales[1];
    p.lo[s] = w + r_lo * A.row_bytes + (u_off + warp) * 64 + t * 16;
    p.hi[s] = w + r_hi * A.row_bytes + (u_off + warp) * 64 + t * 16;
    p.sc[s] = static_cast<const uint8_t*>(sc) +
              2 * qweight_int4_scale_index(A.n_units, r_sc, u_off + warp) + (g == 0 && t < 2 ? t * 16 : 0);
  }
}

// Issues the copies of the unit `j` units past this warp's first one into ring slot `slot`
// (this lane's 16 bytes of rows g, g + 8 per stream at slot + (2 s + h) * 512 + lane * 16; int4:
// lanes 0 and 1 also copy the unit's 16 scales of the tile to slot - lane * 16 + S * 1024 + s * 32).
// The scales travel in the same commit group as the weights: loaded into registers with plain
// loads, every use waited out the newest load's DRAM latency (H200 ncu of the int4 lm_head GEMV:
// 26% of the stall samples on the scale loads' consumer; loads share a scoreboard).
template <QFormat F, int S>
__device__ __forceinline__ void load_stage(uint32_t slot, bool copies_scales, const TilePtrs<S>& p, int j) {
  const int64_t off = static_cast<int64_t>(j) * 64;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    cp_async16(slot + (2 * s) * 512, p.lo[s] + off);
    cp_async16(slot + (2 * s + 1) * 512, p.hi[s] + off);
    if constexpr (F == QFormat::Int4) {
      if (copies_scales) cp_async16(slot + S * 1024 + s * kScaleBytes, p.sc[s] + static_cast<int64_t>(j) * kScaleBytes);
    }
  }
}

// The TMA ring (kTma, EMBER_CUDA_QGEMV_TMA). A warp's slot holds its unit's weights in
// load_stage's layout (stream s at s * 1024: rows 0-7 of the tile, then rows 8-15, 64 bytes each),
// and int4's scales in a region of their own (S x 32 bytes a slot), so that every slot starts
// 128-byte aligned. The copies are the TMA unit's, not the lanes': lane 0 arms the slot's
// mbarrier with the bytes to come, lanes 0 .. 2S - 1 copy a stream's two 8-row boxes
// (cp.async.bulk.tensor.2d), int4's lanes 2S .. 4S - 1 the two 16-byte halves of its scales
// (cp.async.bulk). A slot whose unit lies past the tile (or past the block's last tile) is only
// arrived at, so that every slot completes one phase a chunk. Rows past the matrix read zeros.
// The question it answers: whether the lanes' cp.async queues are what delays the x staging, the
// counters and the attention behind a GEMV's weights (docs/CUDA_NOTES.md "Session 55").
constexpr size_t kTmaBarBytes = 512;  // kWarps x at most 8 stages x 8 bytes
constexpr size_t kTmaSmemExtra = 128 + kTmaBarBytes;  // alignment slack + the barriers

template <int S>
struct TmaTile {
  int map[S];                 // the tensor map of stream s
  int row[S][2];              // first row of the boxes of tile rows 0-7 and 8-15
  const uint8_t* sc[S][2];    // int4: the scales of those rows at this warp's first unit
  int x0;                     // byte column of this warp's first unit
};
template <int S, bool kRope = false, typename Args>
__device__ __forceinline__ void tma_tile(const Args& A, int tile, int warp, int u_off, TmaTile<S>& tt) {
  const Seg sg = seg_of<S == 2>(A, tile);
  int si = 0;
#pragma unroll
  for (int i = 1; i < kQGemvMaxSegs; ++i)
    if (S == 1 && i < A.n_segs && tile >= A.tile_end[i - 1]) si = i;
  const int tl = tile - sg.t0;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    tt.map[s] = S == 2 ? s : si;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int64_t r;
      if constexpr (kRope) r = rope_tile_row(A.rope, seg_index(A, tile), tl, 8 * h);
      else r = static_cast<int64_t>(tl) * 16 + 8 * h;
      tt.row[s][h] = static_cast<int>(r);
      const void* sc = s == 0 ? sg.sc : A.scales[1];
      tt.sc[s][h] = static_cast<const uint8_t*>(sc) + 2 * qweight_int4_scale_index(A.n_units, r, u_off + warp);
    }
  }
  tt.x0 = (u_off + warp) * 64;
}
// The TMA ring's device steps exist only in the sm_90a pass (wgmma.cuh's EMBER_WGMMA_DEVICE):
// launch_tma launches a kTma kernel only on a GPU that runs that code (tma_ring_on), so elsewhere
// they are empty and the kernel traps.
__device__ __forceinline__ void tma_ring_init(uint32_t bars, int n) {
#if defined(EMBER_WGMMA_DEVICE)
  for (int p = 0; p < n; ++p) wg::mbar_init(bars + 8 * p, 1);
  wg::fence_mbar_init();
  wg::fence_proxy_async();  // (the zeroed scales, before the copies)
#else
  __trap();
#endif
}
__device__ __forceinline__ void tma_ring_wait(uint32_t bar, uint32_t parity) {
#if defined(EMBER_WGMMA_DEVICE)
  wg::mbar_wait(bar, parity);
#endif
}
// Unit j of this warp's tile (tt) into the slot at wslot / sslot (the warp's, not a lane's),
// completing on bar; every lane calls it.
template <QFormat F, int S>
__device__ __forceinline__ void tma_stage(const CUtensorMap* maps, uint32_t wslot, uint32_t sslot, uint32_t bar,
                                          const TmaTile<S>& tt, int j, bool loaded, int lane) {
#if defined(EMBER_WGMMA_DEVICE)
  if (lane == 0) {
    if (loaded) wg::mbar_expect_tx(bar, S * 1024 + (F == QFormat::Int4 ? S * kScaleBytes : 0));
    else wg::mbar_arrive(bar);
  }
  __syncwarp();
  if (!loaded) return;
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (lane == 2 * s + h) {
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
            "{%2, %3}], [%4], %5;" ::"r"(wslot + s * 1024 + h * 512),
            "l"(reinterpret_cast<uint64_t>(maps + tt.map[s])), "r"(tt.x0 + j * 64), "r"(tt.row[s][h]), "r"(bar),
            "l"(l2_weights_policy())
            : "memory");
      }
      if constexpr (F == QFormat::Int4) {
        if (lane == 2 * S + 2 * s + h) {
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], 16, [%2], "
              "%3;" ::"r"(sslot + s * kScaleBytes + h * 16),
              "l"(tt.sc[s][h] + static_cast<int64_t>(j) * kScaleBytes), "r"(bar), "l"(l2_weights_policy())
              : "memory");
        }
      }
    }
#endif
}

// This lane's 16 bytes of rows g (lo) and g + 8 (hi) of stream s from a ring slot.
__device__ __forceinline__ void read_slot(const uint8_t* slot, int s, uint32_t (&lo)[4], uint32_t (&hi)[4]) {
  const uint4 lv = *reinterpret_cast<const uint4*>(slot + (2 * s) * 512);
  const uint4 hv = *reinterpret_cast<const uint4*>(slot + (2 * s + 1) * 512);
  lo[0] = lv.x, lo[1] = lv.y, lo[2] = lv.z, lo[3] = lv.w;
  hi[0] = hv.x, hi[1] = hv.y, hi[2] = hv.z, hi[3] = hv.w;
}

// One 8-element chunk of x row `row` (v0, v1, already normalized) into the staged layout: chunk
// ci of unit u; int4 also sums the unit's 16 chunks as BF16 into xsum (a shuffle over the 16
// lanes that hold them: every lane of the warp must call this, ok or not).
template <QFormat F>
__device__ __forceinline__ void store_chunk(const SArgs& A, uint8_t* smem, float* xsum, float4 v0, float4 v1, int row,
                                            int u, int ci, bool ok) {
  constexpr int U = SFmt<F>::kUnit;
  uint4 o;
  if constexpr (F == QFormat::Int4) {
    o = bf16x8(v0, v1);
    float sum = bf16x8_sum(o);
#pragma unroll
    for (int d = 8; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);  // the unit's 16 chunks
    if (ok && ci == 0) xsum[u * 8 + row] = sum;
    if (ok) *reinterpret_cast<uint4*>(smem + row * A.x_stride + u * (2 * U) + (ci % 4) * 64 + (ci / 4) * 16) = o;
  } else {
    using T = typename SFmt<F>::T;
    const float s = SFmt<F>::kXScale;
    o.x = pack2<T>(v0.x * s, v0.z * s);
    o.y = pack2<T>(v0.y * s, v0.w * s);
    o.z = pack2<T>(v1.x * s, v1.z * s);
    o.w = pack2<T>(v1.y * s, v1.w * s);
    if (ok) *reinterpret_cast<uint4*>(smem + row * A.x_stride + u * (2 * U) + (ci % 2) * 64 + (ci / 2) * 16) = o;
  }
}

// rms_norm of one chunk of row `row` at k0 (v0, v1: x; w0, w1: the norm's weights there; s_inv:
// the rows' inverse RMS); the first tile's blocks (block 0, or each rank of the first cluster for
// its slice) also write it to A.norm.out as F32.
__device__ __forceinline__ void norm_chunk(const SArgs& A, const float* s_inv, int row, int64_t k0, float4 w0,
                                           float4 w1, float4& v0, float4& v1) {
  v0 = rms_scale4(v0, s_inv[row], w0);
  v1 = rms_scale4(v1, s_inv[row], w1);
  if (static_cast<int>(blockIdx.x) < A.cluster && A.norm.out) {
    float4* op = reinterpret_cast<float4*>(A.norm.out + row * A.k + k0);
    op[0] = v0;
    op[1] = v1;
  }
}

// x [n, k] F32 -> BF16 (int8: F16) in shared memory (see the file comment) and for int4 the sum
// of each unit's BF16 x per batch row (xsum [unit][8], zero for rows >= n); with A.norm, x is
// rms_norm(x) (block 0 also writes it to A.norm.out as F32). Warp by warp: warp w stages only
// the units it multiplies (w, w + 8, ...: a warp's units never change with the tile), so it
// starts on its weights as soon as its own x is in, with no block barrier after the staging;
// each lane has B chunks' loads (x, and the norm's weights) in flight at once: one L2 round
// trip at k 4096 and batch 1 where a block-wide loop took two, two where it took seven (k
// 14336; session 13). The zero block is the kernel's (written before the wait). The norm's
// sums are block-wide (rms_inverse_rows, one barrier).
// In a cluster, the block stages its slice: units [u_off, u_off + n_loc) of x, at local unit
// indices from 0.
template <QFormat F, bool kNorm>
__device__ void stage_x_warp(const SArgs& A, int u_off, int n_loc, uint8_t* smem, float* s_part, float* s_inv) {
  constexpr int B = kNorm ? 2 : 4;  // (the norm's weights take the other registers)
  if (kNorm) rms_inverse_rows<kWarps * 32>(A.x, A.n, A.k, A.norm.eps, s_part, s_inv);
  constexpr int U = SFmt<F>::kUnit;
  constexpr int kPerUnit = U / 8;  // 16-byte chunks (8 elements) per unit
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int J = n_loc > warp ? (n_loc - warp + kWarps - 1) / kWarps : 0;  // this warp's units
  const int total = A.n * J * kPerUnit;  // chunk q = ((row * J) + j) * kPerUnit + ci
  float* xsum = reinterpret_cast<float*>(smem + A.n * A.x_stride + kZeroBytes);
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int base = 0; base < total; base += 32 * B) {  // uniform in the warp (shuffles below)
    float4 xv[B][2], wv[B][2];
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int q = base + b * 32 + lane, rj = q / kPerUnit;
      const int row = rj / J, u = warp + kWarps * (rj % J);
      const int64_t k0 = static_cast<int64_t>(u_off + u) * U + (q % kPerUnit) * 8;
      xv[b][0] = xv[b][1] = wv[b][0] = wv[b][1] = zero;
      if (q < total && k0 < A.k) {  // k % 8 == 0: a chunk is all in or all out
        const float4* xp = reinterpret_cast<const float4*>(A.x + row * A.k + k0);
        xv[b][0] = __ldg(xp);
        xv[b][1] = __ldg(xp + 1);
        if (kNorm) {
          wv[b][0] = xnorm_w4(A.norm, k0 / 4);
          wv[b][1] = xnorm_w4(A.norm, k0 / 4 + 1);
        }
      }
    }
    // (The chunk's indices are computed again rather than kept from the loop above: kept in
    // arrays, batch-1 decode measured 1-2% slower, int4 391 / 398 vs 401 / 404 tok/s.)
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int q = base + b * 32 + lane, rj = q / kPerUnit, ci = q % kPerUnit;
      const bool ok = q < total;
      const int row = ok ? rj / J : 0, u = warp + kWarps * (ok ? rj % J : 0);
      const int64_t k0 = static_cast<int64_t>(u_off + u) * U + ci * 8;
      float4 v0 = xv[b][0], v1 = xv[b][1];
      if (kNorm && ok && k0 < A.k) norm_chunk(A, s_inv, row, k0, wv[b][0], wv[b][1], v0, v1);
      store_chunk<F>(A, smem, xsum, v0, v1, row, u, ci, ok);
    }
  }
  if constexpr (F == QFormat::Int4) {
    for (int i = lane; i < J * 8; i += 32)
      if (i % 8 >= A.n) xsum[(warp + kWarps * (i / 8)) * 8 + i % 8] = 0.0f;
  }
}

// stage_x_warp for one batch row with the norm folded, where each lane's x is one round of
// kNormOneB chunks (k <= 4096, no cluster): then a virtual warp of the norm's sums
// (rms_inverse_rows: one float4 a virtual thread at k <= 4096) is 128 consecutive elements, and
// the sums can be taken from the x the lanes stage instead of a pass of their own. Every
// dependent memory trip after the PDL wait costs ~1.4 us at batch 1 (the weights' copies fill
// the queues: session 27's probe, x staged 2,831 cycles without a norm, 8,007 with one), and the
// block-wide path takes two (x for the sums; x and the norm's weights for the staging). Here the
// norm's weights, model constants, are loaded before the wait (load_norm_one) and x once after
// it; each float4's sum of squares goes through shared memory (sq) to the warp that sums its
// virtual warp, in the norm kernel's order, so the result is the same bit for bit.
constexpr int kNormOneB = 2;
struct NormOneChunk {
  int u, ci;
  int64_t k0;
  bool in;    // a chunk of this warp's units (stored, zero where past k)
  bool live;  // and inside k (loaded, normalized)
};
template <QFormat F>
__device__ __forceinline__ NormOneChunk norm_one_chunk(const SArgs& A, int b) {
  constexpr int U = SFmt<F>::kUnit, kPerUnit = U / 8;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int J = A.n_units > warp ? (A.n_units - warp + kWarps - 1) / kWarps : 0;  // this warp's units
  const int q = b * 32 + lane;
  const bool in = q < J * kPerUnit;
  const int u = warp + kWarps * (in ? q / kPerUnit : 0), ci = q % kPerUnit;
  const int64_t k0 = static_cast<int64_t>(u) * U + ci * 8;
  return NormOneChunk{u, ci, k0, in, in && k0 < A.k};
}
template <QFormat F>
__device__ __forceinline__ void load_norm_one(const SArgs& A, float4 (&w)[kNormOneB][2]) {
#pragma unroll
  for (int b = 0; b < kNormOneB; ++b) {
    const NormOneChunk c = norm_one_chunk<F>(A, b);
    w[b][0] = w[b][1] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c.live) {
      w[b][0] = xnorm_w4(A.norm, c.k0 / 4);
      w[b][1] = xnorm_w4(A.norm, c.k0 / 4 + 1);
    }
  }
}
// sq: k / 4 floats of shared memory; s_part: 32 floats.
template <QFormat F>
__device__ void stage_x_norm_one(const SArgs& A, const float4 (&w)[kNormOneB][2], uint8_t* smem, float* sq,
                                 float* s_part) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float4 xv[kNormOneB][2];
#pragma unroll
  for (int b = 0; b < kNormOneB; ++b) {
    const NormOneChunk c = norm_one_chunk<F>(A, b);
    xv[b][0] = xv[b][1] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c.live) {
      const float4* xp = reinterpret_cast<const float4*>(A.x + c.k0);
      xv[b][0] = __ldg(xp);
      xv[b][1] = __ldg(xp + 1);
    }
  }
#pragma unroll
  for (int b = 0; b < kNormOneB; ++b) {
    const NormOneChunk c = norm_one_chunk<F>(A, b);
    if (c.live) {
      sq[c.k0 / 4] = sum_sq4(xv[b][0]);
      sq[c.k0 / 4 + 1] = sum_sq4(xv[b][1]);
    }
  }
  __syncthreads();
  // Virtual thread t of rms_inverse_rows sums float4 t alone (the zeros after it change nothing),
  // virtual warp vw the float4s 32 vw .. 32 vw + 31.
  const int n4 = static_cast<int>(A.k / 4), vwarps = rms_reg_threads(A.k) / 32;
  for (int vw = warp; vw < vwarps; vw += kWarps) {
    const int i = vw * 32 + lane;
    const float part = warp_sum(i < n4 ? sq[i] : 0.0f);
    if (lane == 0) s_part[vw] = part;
  }
  __syncthreads();
  const float inv[1] = {rms_inverse(warp_sum(lane < vwarps ? s_part[lane] : 0.0f), A.k, A.norm.eps)};
  float* xsum = reinterpret_cast<float*>(smem + A.x_stride + kZeroBytes);
#pragma unroll
  for (int b = 0; b < kNormOneB; ++b) {
    const NormOneChunk c = norm_one_chunk<F>(A, b);
    float4 v0 = xv[b][0], v1 = xv[b][1];
    if (c.live) norm_chunk(A, inv, 0, c.k0, w[b][0], w[b][1], v0, v1);
    store_chunk<F>(A, smem, xsum, v0, v1, 0, c.u, c.ci, c.in);
  }
  if constexpr (F == QFormat::Int4) {
    const int J = A.n_units > warp ? (A.n_units - warp + kWarps - 1) / kWarps : 0;
    for (int i = lane; i < J * 8; i += 32)
      if (i % 8 >= 1) xsum[(warp + kWarps * (i / 8)) * 8 + i % 8] = 0.0f;
  }
}

// acc += one unit's products: the weights of ring slot `slot`, x B fragments at xb (+ j * 64),
// int4: the unit's x sums at xs and the group scales of rows g, g + 8 at sc (+ s * 32).
template <QFormat F, int S>
__device__ __forceinline__ void compute_unit(const uint8_t* slot, const uint8_t* sc, const uint8_t* xb_ptr,
                                             const float* xs_ptr, float (&acc)[S][4]) {
  uint4 xb[SFmt<F>::kXVec];
#pragma unroll
  for (int j = 0; j < SFmt<F>::kXVec; ++j) xb[j] = *reinterpret_cast<const uint4*>(xb_ptr + j * 64);
  if constexpr (F == QFormat::Int4) {
    const float2 xs = *reinterpret_cast<const float2*>(xs_ptr);
#pragma unroll
    for (int s = 0; s < S; ++s) {
      uint32_t lo[4], hi[4];
      read_slot(slot, s, lo, hi);
      float pa[4] = {0.f, 0.f, 0.f, 0.f}, pb[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // step 2i: pairs 0, 1 (elements 8i..8i+3); step 2i + 1: pairs 2, 3.
        mma_k16(pa, i4pair(lo[i], 0), i4pair(hi[i], 0), i4pair(lo[i], 1), i4pair(hi[i], 1), (&xb[i].x)[0],
                 (&xb[i].x)[1]);
        mma_k16(pb, i4pair(lo[i], 2), i4pair(hi[i], 2), i4pair(lo[i], 3), i4pair(hi[i], 3), (&xb[i].x)[2],
                 (&xb[i].x)[3]);
      }
      const float sl = __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(sc + s * kScaleBytes));
      const float sh = __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(sc + s * kScaleBytes + 16));
      acc[s][0] = fmaf(sl, fmaf(-136.0f, xs.x, pa[0] + pb[0]), acc[s][0]);
      acc[s][1] = fmaf(sl, fmaf(-136.0f, xs.y, pa[1] + pb[1]), acc[s][1]);
      acc[s][2] = fmaf(sh, fmaf(-136.0f, xs.x, pa[2] + pb[2]), acc[s][2]);
      acc[s][3] = fmaf(sh, fmaf(-136.0f, xs.y, pa[3] + pb[3]), acc[s][3]);
    }
  } else {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      uint32_t lo[4], hi[4];
      read_slot(slot, s, lo, hi);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t* xr = &xb[i / 2].x + 2 * (i % 2);
        mma_k16<typename SFmt<F>::T>(acc[s], SFmt<F>::p02(lo[i]), SFmt<F>::p02(hi[i]), SFmt<F>::p13(lo[i]),
                                     SFmt<F>::p13(hi[i]), xr[0], xr[1]);
      }
    }
  }
}

// A tile's finished sums (row scale applied) into the outputs: gate/up + GLU, or + bias (+= out_v).
template <bool kGlu, int S>
__device__ __forceinline__ void store_tile_result(const SArgs& A, const Seg& sg, int64_t i, const float (&sum)[S],
                                                  float bias_v, float out_v) {
  if constexpr (kGlu) {
    if (A.gate_out) A.gate_out[i] = sum[0];
    if (A.up_out) A.up_out[i] = sum[1];
    A.glu_out[i] = glu_act(sum[0], A.gelu) * sum[1];
  } else {
    const float y = sum[0] + bias_v;
    sg.out[i] = sg.accumulate ? out_v + y : y;
  }
}

// The rope epilogue's output (kRope) of segment si (0 q, 1 k, 2 v) at t: y this thread's value,
// other its pair's (q, k: thread x ^ 2 holds the other row of the rotated pair; lo: this one holds
// the first), rotated with launch_rope_kv_store's arithmetic (same sincosf, factor and
// expressions), written as F32 like the plain GEMV, and k, v also into the cache at the slot.
__device__ __forceinline__ void rope_store(const SArgsRope& A, int si, const TileOut& t, float y, float other, bool lo,
                                           float pos, float freq, int32_t slot) {
  if (si < 2) {
    float cs, sn;
    rope_cos_sin(A.rope, pos, freq, cs, sn);
    y = lo ? y * cs - other * sn : other * sn + y * cs;
  }
  t.sg.out[t.col * t.sg.m + t.row] = y;
  // (k and v rows: whole kv heads)
  if (si > 0 && slot >= 0) rope_cache_store(A.rope, si, static_cast<size_t>(slot) * t.sg.m + t.row, y);
}

// kCl: the cluster split (A.cluster > 1) compiled in; the kernel without it is the one every
// batch-1 GEMV takes (compiled with the split's runtime checks, batch-1 int4 lost 4.5%: 502 ->
// 479 tok/s, H200, session 22 call 2).
// X: how x is staged (XStage), a kernel each: with the three stagings as runtime branches of one
// kernel (91 KB of int4 code), the block-wide norm path ran batch-1 int4 4.6% slower than the
// 78 KB kernel it came from did (502.8 -> 479.8 tok/s, H200, session 28 call 1), and
// stage_x_norm_one's gain was mostly lost to that. Why is open (code fetch, or ptxas scheduling
// the loop differently): the 50 KB kernel of that path alone still measured 494 there (call 2).
// kRope: the rope + K/V store epilogue (GemvRope; one batch row, S == 1, no cluster).
// kNext: the L2 prefetch of the next GEMV's weights (L2Prefetch; plain GEMVs, no cluster).
// kGate: the ring's first copies wait at a decode attention's start gate (SArgsGate; plain
// GEMVs, no cluster).
// kTwin: a plain GEMV (one segment) on tiles of S x 16 rows, stream s the tile's rows 16 s ..
// 16 s + 15 (tile_ptrs), so that S 16-row tiles are in flight from a block's start.
template <QFormat F, int S, int P, int R, bool kCl, XStage X, bool kRope = false, bool kNext = false,
          bool kGate = false, bool kTma = false, bool kTwin = false>
__global__ void __launch_bounds__(kWarps * 32, 2)
    qgemv_staged_kernel(const __grid_constant__ KArgs<kRope, kNext, kGate, kTma> A) {
  static_assert(!kRope || (S == 1 && !kCl), "the rope epilogue: plain GEMVs without the cluster split");
  static_assert(!kNext || (S == 1 && !kCl && !kRope), "the prefetch: plain GEMVs without the cluster split");
  static_assert(!kGate || ((S == 1 || kTwin) && !kCl && !kRope && !kNext),
                "the gate: plain GEMVs without the cluster split");
  static_assert(!kTwin || (S == 2 && !kCl && !kRope && !kNext && !kTma && X == XStage::Plain),
                "twin tiles: plain GEMVs, two streams");
  static_assert(!kTma || (!kCl && !kNext), "the TMA ring: no cluster split, no prefetch");
  constexpr bool kGlu = S == 2 && !kTwin;
  constexpr int U = SFmt<F>::kUnit;
  constexpr int kStages = stages<S, R>();
  extern __shared__ __align__(16) uint8_t smem_all[];
  EMBER_PROBE_MARK(1, 0, kGlu, A.n_tiles * 16, A.k);
  __shared__ float4 red[2][kWarps][32][S];
  __shared__ float s_part[kXNormMaxRows * 32], s_inv[kXNormMaxRows];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int n_chunks = A.n_chunks, n_tiles = A.n_tiles;
  // Cluster split (A.cluster > 1): this block's rank takes units [u_off, u_off + n_units) of each
  // of its cluster's tiles (blockIdx.x / cluster, then every gridDim.x / cluster-th one).
  const int C = kCl ? A.cluster : 1;
  const int rank = kCl ? static_cast<int>(blockIdx.x) % C : 0;
  const int u_off = kCl ? rank * A.units_local : 0;
  const int n_units = kCl ? min(A.units_local, A.n_units - u_off) : A.n_units;
  const int tile_stride = kCl ? static_cast<int>(gridDim.x) / C : static_cast<int>(gridDim.x);
  int tile = kCl ? static_cast<int>(blockIdx.x) / C : static_cast<int>(blockIdx.x);
  // This warp's ring: slot p at ring + p * kSlot (kStages * S = R units a warp). With kTma the
  // weights' slots (kWSlot apart) and the int4 scales' (kSSlot apart) are separate regions after
  // the mbarriers, 128-byte aligned (tma_stage).
  constexpr int kSlot = slot_bytes<F, S>();
  constexpr int kWSlot = kTma ? S * 1024 : kSlot;
  constexpr int kSSlot = kTma ? S * kScaleBytes : kSlot;
  uint8_t* base = smem_all;
  if constexpr (kTma) base = smem_all + ((128 - (smem_addr(smem_all) & 127)) & 127) + kTmaBarBytes;
  uint8_t* const wring = base + warp * (kStages * kWSlot);
  uint8_t* const sring = kTma ? base + kWarps * kStages * S * 1024 + warp * (kStages * kSSlot) : wring + S * 1024;
  const uint32_t tma_bar = smem_addr(base - kTmaBarBytes) + warp * kStages * 8;  // (kTma only)
  const uint32_t ring = smem_addr(wring) + lane * 16;
  const uint8_t* ring_ptr = wring + lane * 16;
  // int4: this lane's scale of row g in slot 0 (row g + 8's is 16 bytes on).
  const uint8_t* scale_ptr = sring + g * 2;
  const bool copies_scales = lane < 2;
  uint8_t* smem = base + ring_bytes(F, R);
  if constexpr (F == QFormat::Int4) {  // slots never loaded hold finite scales (their x is the zero block)
#pragma unroll
    for (int p = 0; p < kStages; ++p)
      if (lane < S * kScaleBytes / 4) reinterpret_cast<uint32_t*>(sring + p * kSSlot)[lane] = 0;
    __syncwarp();
  }
  if constexpr (kTma) {
    if (lane == 0) tma_ring_init(tma_bar, kStages);
    __syncwarp();
  }

  // The folded norm's weights first, so that they are back before the ring's copies fill the
  // queues (stage_x_norm_one).
  float4 norm_w[kNormOneB][2];
  if constexpr (X == XStage::NormOne) load_norm_one<F>(A, norm_w);

  TilePtrs<S> lp;
  TmaTile<S> tt;
  if constexpr (kTma) tma_tile<S, kRope>(A, tile, warp, u_off, tt);
  else tile_ptrs<S, kRope, kTwin>(A, tile, g, t, warp, u_off, lp);
  if constexpr (kGate) hold_gate_pass(A.gate, A.gate_arrivals);
#pragma unroll
  for (int p = 0; p < kStages; ++p) {
    if constexpr (kTma) {
      tma_stage<F, S>(A.maps, smem_addr(wring) + p * kWSlot, smem_addr(sring) + p * kSSlot, tma_bar + 8 * p, tt,
                      kWarps * p, warp + kWarps * p < n_units, lane);
    } else {
      if (warp + kWarps * p < n_units) load_stage<F, S>(ring + p * kSlot, copies_scales, lp, kWarps * p);
      cp_commit();
    }
  }
  uint32_t tma_phase = 0;  // (kTma) the parity every slot completes next
  // The zero block for every warp, before the wait (so its barrier costs nothing).
  if (threadIdx.x < kZeroBytes / 16)
    reinterpret_cast<uint4*>(smem + A.n * A.x_stride)[threadIdx.x] = make_uint4(0, 0, 0, 0);
  __syncthreads();
  EMBER_PROBE_MARK(1, 1, kGlu, A.n_tiles * 16, A.k);
  pdl_wait();
  EMBER_PROBE_MARK(1, 2, kGlu, A.n_tiles * 16, A.k);
  pdl_launch_dependents();
  if constexpr (kNext) {
    if (A.next.when == 2 && threadIdx.x == 0) l2_prefetch_slice(A.next, blockIdx.x);
  }
  if constexpr (X == XStage::NormOne) {
    static_assert(sizeof(red) >= 1024 * sizeof(float), "stage_x_norm_one's sums of squares (k <= 4096)");
    stage_x_norm_one<F>(A, norm_w, smem, &red[0][0][0][0].x, s_part);
  } else {
    stage_x_warp<F, X == XStage::Norm>(A, u_off, n_units, smem, s_part, s_inv);
  }
  __syncwarp();
  EMBER_PROBE_MARK(1, 3, kGlu, A.n_tiles * 16, A.k);

  // This lane's B fragments: batch row g, or the zero block (which does not move with the unit).
  const bool xrow = g < A.n;  // (x region: see stage_x_warp)
  const uint8_t* xb_base = smem + (xrow ? g * A.x_stride : A.n * A.x_stride) + t * 16;
  const int xb_step = xrow ? 2 * U : 0;
  const float* xsum = reinterpret_cast<const float*>(smem + A.n * A.x_stride + kZeroBytes);
  const uint8_t* zero_xb = smem + A.n * A.x_stride + t * 16;
  const float* zero_xs = reinterpret_cast<const float*>(smem + A.n * A.x_stride) + 2 * t;

  // Epilogue thread (l, v) = (threadIdx.x / 4, threadIdx.x % 4) of the reduction below: lane l's
  // accumulator v = row (l / 4) + 8 * (v / 2) of the tile, batch column 2 (l % 4) + v % 2.
  const int64_t red_row = threadIdx.x / 16 + 8 * ((threadIdx.x % 4) / 2);
  const int red_col = 2 * ((threadIdx.x / 4) % 4) + threadIdx.x % 2;
  // Cluster: this block's sums of a tile, [2][128][S] (see csum_bytes), after int4's x sums.
  float* csum = reinterpret_cast<float*>(smem + A.n * A.x_stride + kZeroBytes +
                                         (F == QFormat::Int4 ? A.units_local * 8 * 4 : 0));
  int buf = 0;
  for (; tile < n_tiles; tile += tile_stride) {
    // The block that finishes this tile: every block alone, or one rank of the cluster by turns.
    const bool owner = !kCl || tile % C == rank;
    // The epilogue's global reads (fp8 / int8 row scales, bias, the accumulated output), issued
    // when the tile starts: read in the epilogue, every reduction waited out a memory
    // latency while the other warps sat at the barrier (H200 ncu, fp8 lm_head GEMV: 15% of the
    // stall samples on the scale, 24% at the barrier).
    float row_scale[S], bias_v = 0.0f, out_v = 0.0f;
    float twin_bias[S], twin_out[S];  // (kTwin: stream s's bias_v and out_v)
#pragma unroll
    for (int s = 0; s < S; ++s) twin_bias[s] = twin_out[s] = 0.0f;
    float rope_pos = 0.0f, rope_freq = 0.0f;  // kRope: the row's position and frequency, its slot
    int32_t rope_slot = -1;
#pragma unroll
    for (int s = 0; s < S; ++s) row_scale[s] = 1.0f;
    if (kTwin && threadIdx.x < 128) {
      const Seg sg = seg_of<false>(A, tile);
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const int64_t row = static_cast<int64_t>(tile) * 16 * S + 16 * s + red_row;
        if (row < sg.m && red_col < A.n) {
          if constexpr (F != QFormat::Int4) row_scale[s] = __ldg(static_cast<const float*>(sg.sc) + row);
          if (sg.bias) twin_bias[s] = __ldg(sg.bias + row);
          if (sg.accumulate) twin_out[s] = sg.out[red_col * sg.m + row];
        }
      }
    } else if (threadIdx.x < 128 && owner) {
      const TileOut t = tile_out<kGlu, kRope>(A, tile, red_row, red_col);
      const Seg& sg = t.sg;
      const int64_t row = t.row;
      const int col = t.col;
      if constexpr (kRope) {
        if (t.inside) {
          const int si = seg_index(A, tile);
          rope_pos = static_cast<float>(A.rope.positions[col]);
          if (si < 2) rope_freq = A.rope.inv_freq[8 * ((tile - sg.t0) % (A.rope.head_dim / 16)) + (red_row & 7)];
          if (si > 0) rope_slot = A.rope.slots[col];
        }
      }
      if (t.inside) {
        if constexpr (F != QFormat::Int4) {
#pragma unroll
          for (int s = 0; s < S; ++s) row_scale[s] = __ldg(static_cast<const float*>(s == 0 ? sg.sc : A.scales[1]) + row);
        }
        if constexpr (!kGlu) {
          if (sg.bias) bias_v = __ldg(sg.bias + row);
          if (sg.accumulate) out_v = sg.out[col * sg.m + row];
        }
      }
    }
    float acc[S][4];
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[s][i] = 0.0f;
    for (int c = 0; c < n_chunks; ++c) {
      const bool last = c + 1 == n_chunks;
      const int ntile = last ? tile + tile_stride : tile;
      const int nc = last ? 0 : c + 1;
      if (last && ntile < n_tiles) {
        if constexpr (kTma) tma_tile<S, kRope>(A, ntile, warp, u_off, tt);
        else tile_ptrs<S, kRope, kTwin>(A, ntile, g, t, warp, u_off, lp);
      }
      if constexpr (kNext) {  // (the block's last chunk: every copy of its own issued)
        if (A.next.when == 0 && last && ntile >= n_tiles && threadIdx.x == 0)
          l2_prefetch_slice(A.next, blockIdx.x);
      }
      // Units of slot p: warp + kWarps * (c * kStages + p) now, the same p of chunk nc next.
      const int u0 = warp + kWarps * c * kStages;
      const uint8_t* xb_c = xb_base + u0 * xb_step;
      const float* xs_c = xsum + u0 * 8 + 2 * t;
      // P units per wait, branch-free inside (a unit past n_units reads the zero block as x: adds
      // 0), so the compiler can interleave their dequantization and mma chains.
#pragma unroll
      for (int p = 0; p < kStages; p += P) {
        if constexpr (kTma) {
#pragma unroll
          for (int q = 0; q < P; ++q) tma_ring_wait(tma_bar + 8 * (p + q), tma_phase);
        } else {
          cp_wait<kStages - P>();  // this lane's copies of slots p..p+P-1 (the oldest groups) have landed
          if constexpr (F == QFormat::Int4) __syncwarp();  // and so have lanes 0 and 1's scales
        }
        if (u0 + kWarps * p < n_units) {
#pragma unroll
          for (int q = 0; q < P; ++q) {
            const bool ok = u0 + kWarps * (p + q) < n_units;
            compute_unit<F, S>(ring_ptr + (p + q) * kWSlot, scale_ptr + (p + q) * kSSlot,
                               ok ? xb_c + (p + q) * kWarps * xb_step : zero_xb,
                               ok ? xs_c + (p + q) * kWarps * 8 : zero_xs, acc);
          }
        }
        // every lane has read the scales lanes 0, 1 overwrite (kTma: the whole slot)
        if constexpr (F == QFormat::Int4 || kTma) __syncwarp();
#pragma unroll
        for (int q = 0; q < P; ++q) {
          const int nj = kWarps * (nc * kStages + p + q);
          if constexpr (kTma) {
            tma_stage<F, S>(A.maps, smem_addr(wring) + (p + q) * kWSlot, smem_addr(sring) + (p + q) * kSSlot,
                            tma_bar + 8 * (p + q), tt, nj, ntile < n_tiles && warp + nj < n_units, lane);
          } else {
            if (ntile < n_tiles && warp + nj < n_units) load_stage<F, S>(ring + (p + q) * kSlot, copies_scales, lp, nj);
            cp_commit();
          }
        }
      }
      if constexpr (kTma) tma_phase ^= 1;
    }
    EMBER_PROBE_MARK(1, 4, tile, A.n_tiles * 16, A.k);
#pragma unroll
    for (int s = 0; s < S; ++s) red[buf][warp][lane][s] = make_float4(acc[s][0], acc[s][1], acc[s][2], acc[s][3]);
    __syncthreads();
    EMBER_PROBE_MARK(1, 5, tile, A.n_tiles * 16, A.k);
    if constexpr (kRope) {
      if (threadIdx.x < 128) {  // (whole warps: the pair's value comes by a shuffle)
        const int l = threadIdx.x / 4, v = threadIdx.x % 4;
        const TileOut t = tile_out<kGlu, true>(A, tile, red_row, red_col);
        float z = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) z += (&red[buf][w][l][0].x)[v];
        if constexpr (F != QFormat::Int4) z *= row_scale[0] * SFmt<F>::kSumScale;
        const float y = z + bias_v;
        const float other = __shfl_xor_sync(0xffffffffu, y, 2);
        if (t.inside) rope_store(A, seg_index(A, tile), t, y, other, red_row < 8, rope_pos, rope_freq, rope_slot);
      }
    } else if constexpr (kTwin) {
      if (threadIdx.x < 128) {
        const int l = threadIdx.x / 4, v = threadIdx.x % 4;
        const Seg sg = seg_of<false>(A, tile);
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const int64_t row = static_cast<int64_t>(tile) * 16 * S + 16 * s + red_row;
          float z = 0.0f;
#pragma unroll
          for (int w = 0; w < kWarps; ++w) z += (&red[buf][w][l][s].x)[v];
          if constexpr (F != QFormat::Int4) z *= row_scale[s] * SFmt<F>::kSumScale;
          const float y = z + twin_bias[s];
          if (row < sg.m && red_col < A.n) sg.out[red_col * sg.m + row] = sg.accumulate ? twin_out[s] + y : y;
        }
      }
    } else if constexpr (!kCl) {
      if (threadIdx.x < 128) {
        const int l = threadIdx.x / 4, v = threadIdx.x % 4;
        const TileOut t = tile_out<kGlu>(A, tile, red_row, red_col);
        if (t.inside) {
          float sum[S];
#pragma unroll
          for (int s = 0; s < S; ++s) {
            float z = 0.0f;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) z += (&red[buf][w][l][s].x)[v];
            if constexpr (F != QFormat::Int4) z *= row_scale[s] * SFmt<F>::kSumScale;
            sum[s] = z;
          }
          store_tile_result<kGlu>(A, t.sg, t.col * t.sg.m + t.row, sum, bias_v, out_v);
        }
      }
      EMBER_PROBE_MARK(1, 6, tile, A.n_tiles * 16, A.k);
    } else {
      // Cluster: each block sums its warps, then the owner adds the blocks' sums in rank order
      // (each thread's loads all issued first), so the result does not depend on timing. The
      // double buffer lets one cluster barrier a tile order both the writes before the reads
      // and the reads before the rewrite two tiles on.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      float* mine = csum + (buf * 128 + threadIdx.x) * S;
      if (threadIdx.x < 128) {
        const int l = threadIdx.x / 4, v = threadIdx.x % 4;
#pragma unroll
        for (int s = 0; s < S; ++s) {
          float z = 0.0f;
#pragma unroll
          for (int w = 0; w < kWarps; ++w) z += (&red[buf][w][l][s].x)[v];
          mine[s] = z;
        }
      }
      cluster.sync();
      if (threadIdx.x < 128 && owner) {
        float part[kMaxCluster][S];
#pragma unroll
        for (int q = 0; q < kMaxCluster; ++q)
          if (q < C) {
            const float* theirs = cluster.map_shared_rank(mine, q);
#pragma unroll
            for (int s = 0; s < S; ++s) part[q][s] = theirs[s];
          }
        float sum[S];
#pragma unroll
        for (int s = 0; s < S; ++s) {
          float z = part[0][s];
#pragma unroll
          for (int q = 1; q < kMaxCluster; ++q)
            if (q < C) z += part[q][s];
          sum[s] = z;
        }
        const TileOut t = tile_out<kGlu>(A, tile, red_row, red_col);
        if (t.inside) {
          if constexpr (F != QFormat::Int4) {
#pragma unroll
            for (int s = 0; s < S; ++s) sum[s] *= row_scale[s] * SFmt<F>::kSumScale;
          }
          store_tile_result<kGlu>(A, t.sg, t.col * t.sg.m + t.row, sum, bias_v, out_v);
        }
      }
#endif
    }
    buf ^= 1;  // the next tile writes the other buffer; the barrier above orders the reuse
  }
  EMBER_PROBE_MARK(1, 7, kGlu, A.n_tiles * 16, A.k);
  if constexpr (kNext) {
    if (A.next.when == 1 && threadIdx.x == 0) l2_prefetch_slice(A.next, blockIdx.x);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kCl) cooperative_groups::this_cluster().sync();  // no block leaves while its sums may be read
#endif
}

// Blocks of kernel with smem bytes of dynamic shared memory that the GPU holds at once (cached):
// resident blocks an SM times the SMs, or with clusters of `cluster` blocks, the clusters that
// fit at once times the cluster size.
template <typename K>
int resident_blocks(K kernel, size_t smem, size_t max_dynamic_smem, int cluster) {
  struct Entry {
    const void* fn;
    int dev;
    size_t smem;
    int cluster;
    int blocks;
  };
  static std::mutex mu;
  static Entry cache[64];
  static int used = 0;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < used; ++i)
    if (cache[i].fn == reinterpret_cast<const void*>(kernel) && cache[i].dev == dev && cache[i].smem == smem &&
        cache[i].cluster == cluster)
      return cache[i].blocks;
  int per_sm = 0, sms = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(max_dynamic_smem)) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  int blocks = per_sm * sms;
  if (cluster > 1) {
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = qgemm_detail::clustered_config(dim3(static_cast<unsigned>(cluster)), kWarps * 32,
                                                                  smem, static_cast<unsigned>(cluster), false,
                                                                  nullptr, attr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) return 0;
    blocks = clusters * cluster;
  }
  if (used < 64) cache[used++] = Entry{reinterpret_cast<const void*>(kernel), dev, smem, cluster, blocks};
  return blocks;
}

// The dynamic shared memory that holds a staged kernel of S streams to one block an SM: at least
// `own`, raised until a block takes 128 KiB of the SM (more than half of an H100 / H200 SM's 228
// KiB) with its static shared memory and the block's reserve, so that a second block never fits
// but one block of the next GEMV (gate/up + GLU: 94.5 KiB) still does; `own` where that exceeds
// what a block may take.
size_t one_block_smem(size_t own, int S) {
  int dev = 0, per_sm = 0, reserved = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return own;
  const size_t block = std::max<size_t>(static_cast<size_t>(per_sm) / 2 + 1, size_t{128} * 1024);
  const size_t fixed = static_smem(S) + static_cast<size_t>(reserved);
  const size_t smem = block > fixed ? (block - fixed + 127) / 128 * 128 : 0;
  return smem > static_cast<size_t>(optin) || smem < own ? own : smem;
}

template <QFormat F, int S, int R, bool kCl, XStage X>
auto staged_kernel(bool pair) {
  return pair ? qgemv_staged_kernel<F, S, 2, R, kCl, X> : qgemv_staged_kernel<F, S, 1, R, kCl, X>;
}

// Units per cp.async wait: EMBER_CUDA_QGEMV_PAIR=1 -> 2, =0 -> 1; unset: 1 for gate/up + GLU,
// 2 for the plain GEMVs (H200: int4 gate/up+GLU 2772 vs 2601 GB/s with 1, fp8 lm_head 3657 vs
// 3416 with 2; session 20 call 3, int4 with 1 -> 2: gate/up+GLU 3325 -> 3204, q/o 1453 ->
// 1514, q/k/v 1695 -> 1726, down 2405 -> 2460, lm_head 3053 -> 3073; call 7, the GLU with 2
// -> 1: batch-1 fp8 355 -> 359 tok/s, int8 365 -> 369).
bool two_units_a_wait(int S) {
  static const int pair_env = [] {
    const char* e = std::getenv("EMBER_CUDA_QGEMV_PAIR");
    return e == nullptr ? -1 : std::strcmp(e, "0") != 0 ? 1 : 0;
  }();
  return pair_env < 0 ? S == 1 : pair_env == 1;
}

// EMBER_CUDA_QGEMV_GATE_ONE (1 on, 0 off; unset: on except for int4 on an H100): the gated o GEMV of
// int4 and fp8 weights at one block an SM (one_block_smem), its 256 tiles over 132 blocks. It waits at
// the attention's start gate, so it is the one GEMV that runs beside another kernel; with one
// block an SM (and room left) the attention runs beside fewer of its blocks and the GLU's blocks
// enter, issue their first copies and stage x while it still streams. H200, batch 1, same binary,
// its dynamic shared memory padded by 70,000-80,000 bytes (int4) / 50,000 (fp8), one block an SM
// as one_block_smem's ~77,500 / ~46,800 give (session 57): int4 554.5-555.4 -> 569.6-570.3 tok/s
// against the TMA ring (the previous default, which it replaces there), 551.5-551.8 without
// either; per step the GLU's advance 649 -> 568 us, the attention's 231 -> 203, the o GEMV's 174
// -> 229; fp8 411.5-412.3 -> 425.3-426.0. H100, same binary, this form (session 58, two calls,
// 5 rounds): fp8 336.6-336.8 -> 338.9-339.1 (+0.7%), int4 510.5-510.8 with the TMA ring (its
// H100 default, session 56) -> 508.7-508.9 (-0.35%), so there int4 keeps the ring. Not int8 (its
// o projection takes no gated kernel by default).
bool gate_one_block(QFormat f) {
  static const int env = qgemm_detail::env_int("EMBER_CUDA_QGEMV_GATE_ONE", -1);
  static const bool h100 = [] {
    int dev = 0;
    cudaDeviceProp prop{};
    return cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess &&
           gpu_is_h100(prop.name);
  }();
  return (env >= 0 ? env != 0 : !h100 || f == QFormat::Fp8) && f != QFormat::Int8;
}

// EMBER_CUDA_QGEMV_GATE_TWIN (A/B; 1 int4, 2 fp8, 3 both; unset or 0 neither): where the gated o
// GEMV runs at one block an SM (gate_one_block), it takes tiles of 32 rows as two streams of 16
// (kTwin): int4's two tiles a block are in flight from its start on the 8-unit ring, where the
// 4-unit ring issues the second tile's copies only as the first's are consumed (session 57's
// traces: that GEMV's advance 174 -> 229 us a step at one block an SM); fp8, whose 8-unit ring
// holds one tile, on a 12-unit ring (96 KiB in flight an SM instead of 64; still room for a GLU
// block beside it). H100, same binary (session 58, 5 rounds): int4 508.0-510.5 tok/s against one
// block's 508.7-508.9 and the TMA ring's 510.5-510.8 (per step the o GEMV's advance 173 -> 241 us
// against the ring, the GLU's 780 -> 718); fp8 333.7-333.8 against one block's 338.9-339.1. Not
// run on an H200, where one block an SM gained most (session 57).
bool gate_twin(QFormat f) {
  static const int env = qgemm_detail::env_int("EMBER_CUDA_QGEMV_GATE_TWIN", 0);
  return (f == QFormat::Int4 && (env & 1) != 0) || (f == QFormat::Fp8 && (env & 2) != 0);
}

// EMBER_CUDA_QGEMV_TMA: which staged GEMVs of int4 and fp8 weights without a cluster split take
// the TMA ring (kTma) where one is built for their shape (launch_typed_tma), a sum of kTmaGlu,
// kTmaPlain, kTmaRope, kTmaGate (15: all; 0: none) for both formats. Unset: int4's gated o GEMV
// only, where that GEMV does not run at one block an SM (gate_one_block: on an H100). H100, int4
// batch 1, same binary (session 56): 499.4 -> 511.1 tok/s with it (the o GEMV's advance 8.3 -> 5.4
// us a layer); q/k/v with the rope +0.8%, the two together +0.3%, the GLU -1.5%, the plain GEMVs
// (down, lm_head) -5.5%; fp8's gated o -0.5%, all of fp8's -4.4%.
constexpr int kTmaGlu = 1, kTmaPlain = 2, kTmaRope = 4, kTmaGate = 8;
bool tma_ring_on(QFormat f, int kind) {
  static const int env = qgemm_detail::env_int("EMBER_CUDA_QGEMV_TMA", -1);
  const int mask = env >= 0 ? env : f == QFormat::Int4 && !gate_one_block(f) ? kTmaGate : 0;
  // (tma_ring_init; asked once, as qgemv_fp8_wg_takes does, not on every launch)
  static const bool device_ok = [] {
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess && sm90a_kernels_run_on(dev);
  }();
  return (mask & kind) != 0 && device_ok;
}

// Whether the gated o GEMV of f runs on twin tiles: asked for, at one block an SM, and not taken by
// the TMA ring (launch_gate_staged tries that first otherwise).
bool gate_twin_on(QFormat f) { return gate_twin(f) && gate_one_block(f) && !tma_ring_on(f, kTmaGate); }

// The TMA ring's map of a packed matrix [m rows, row_bytes] (boxes of 64 bytes x 8 rows, no
// swizzle: the box lands in load_stage's layout).
bool staged_weight_map(CUtensorMap* map, const void* w, int64_t m, int64_t row_bytes) {
  if (reinterpret_cast<uintptr_t>(w) % 16 != 0 || row_bytes % 16 != 0) return false;
  return cached_tensor_map(TensorMapKey{w, m, row_bytes, 0}, map, [&](CUtensorMap* out) {
    const PFN_cuTensorMapEncodeTiled_v12000 fn = encode_tiled();
    if (fn == nullptr) return false;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(m)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
    const cuuint32_t box[2] = {64, 8}, elem[2] = {1, 1};
    return fn(out, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(w), dims, strides, box, elem,
              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  });
}

// Launches the TMA-ring form of a staged kernel with A's arguments and its weights' maps; false
// (nothing launched) where a map cannot be made.
// one_block: at one block an SM (one_block_smem; the gated o GEMV, gate_one_block).
template <QFormat F, int S, int P, int R, XStage X, bool kRope = false, bool kGate = false, class Base>
bool launch_tma(const Base& A, bool pdl, cudaStream_t stream, cudaError_t& err, bool one_block = false) {
  WithMaps<Base> T;
  static_cast<Base&>(T) = A;
  const int n_maps = S == 2 ? 2 : A.n_segs;
  for (int i = 0; i < n_maps; ++i)
    if (!staged_weight_map(&T.maps[i], A.w[i], A.m[S == 2 ? 0 : i], A.row_bytes)) return false;
  auto kernel = qgemv_staged_kernel<F, S, P, R, false, X, kRope, false, kGate, true>;
  size_t smem = staged_smem(F, R, A.n, A.k) + kTmaSmemExtra;
  if (one_block) smem = one_block_smem(smem, S);
  const int resident = resident_blocks(kernel, smem, max_smem(F) + kTmaSmemExtra, 1);
  if (resident <= 0) {
    err = cudaErrorInvalidConfiguration;
    return true;
  }
  const int grid = A.n_tiles < resident ? A.n_tiles : resident;
  err = launch_kernel(kernel, dim3(grid), dim3(kWarps * 32), smem, stream, pdl, T);
  return true;
}

// The TMA ring for what launch_typed runs without a cluster: the batch-1 shapes of int4 and fp8
// (gate/up + GLU with the norm at once, plain GEMVs on the 8-unit ring two units a wait, int4's
// one-row 4-unit ring one unit a wait); false where none is built.
template <QFormat F, int S, int R>
bool launch_typed_tma(const SArgs& A, XStage x, bool pair, bool pdl, cudaStream_t stream, cudaError_t& err) {
  if constexpr (F == QFormat::Int8) {
    return false;
  } else if constexpr (S == 2 && R == 8) {
    return x == XStage::NormOne && !pair && launch_tma<F, 2, 1, 8, XStage::NormOne>(A, pdl, stream, err);
  } else if constexpr (S == 1 && R == 8) {
    return x == XStage::Plain && pair && launch_tma<F, 1, 2, 8, XStage::Plain>(A, pdl, stream, err);
  } else if constexpr (S == 1 && R == 4 && F == QFormat::Int4) {
    return x == XStage::Plain && !pair && launch_tma<F, 1, 1, 4, XStage::Plain>(A, pdl, stream, err);
  } else {
    return false;
  }
}

template <QFormat F, int S, int R>
cudaError_t launch_typed(const SArgs& A, XStage x, bool pdl, cudaStream_t stream, bool one_unit_a_wait) {
  const bool pair = !one_unit_a_wait && two_units_a_wait(S);
  const int C = A.cluster;
  if (C == 1 && tma_ring_on(F, S == 2 ? kTmaGlu : kTmaPlain)) {
    cudaError_t err = cudaSuccess;
    if (launch_typed_tma<F, S, R>(A, x, pair, pdl, stream, err)) return err;
  }
  auto kernel = staged_kernel<F, S, R, false, XStage::Plain>(pair);
  if constexpr (R == 8) {  // (the cluster split and the block-wide folded norm take the 8-unit ring only)
    if (C > 1) {
      kernel = x == XStage::Plain ? staged_kernel<F, S, R, true, XStage::Plain>(pair)
                                  : staged_kernel<F, S, R, true, XStage::Norm>(pair);
    } else if (x == XStage::Norm) {
      kernel = staged_kernel<F, S, R, false, XStage::Norm>(pair);
    } else if (x == XStage::NormOne) {
      kernel = staged_kernel<F, S, R, false, XStage::NormOne>(pair);
    }
  } else if (x == XStage::NormOne) {
    kernel = staged_kernel<F, S, R, false, XStage::NormOne>(pair);
  } else if (x != XStage::Plain) {
    return cudaErrorInvalidValue;
  }
  const size_t smem = staged_smem(F, R, A.n, A.k, C, S);
  const int resident = resident_blocks(kernel, smem, max_smem(F), C) / C;  // blocks, or clusters
  if (resident <= 0) return cudaErrorInvalidConfiguration;
  const int grid = (A.n_tiles < resident ? A.n_tiles : resident) * C;
  if (C > 1) return qgemm_detail::launch_clustered(kernel, dim3(grid), kWarps * 32, smem, static_cast<unsigned>(C), pdl, stream, A);
  return launch_kernel(kernel, dim3(grid), dim3(kWarps * 32), smem, stream, pdl, A);
}

// Whether a one-row GEMV's 4-unit ring setting (EMBER_CUDA_QGEMV_R4 / _R4B: 0 never, 1 with and
// without the folded norm, 2 only with it, 3 only without, 4 as 1) takes a GEMV staged as x.
bool ring4_setting_takes(int setting, XStage x) {
  if (x == XStage::NormOne) return setting == 1 || setting == 2 || setting == 4;
  return x == XStage::Plain && (setting == 1 || setting == 3 || setting == 4);
}

template <int S, int R>
cudaError_t launch_s(QFormat f, const SArgs& A, XStage x, bool pdl, cudaStream_t stream, bool one_unit_a_wait = false) {
  if (f == QFormat::Int4) return launch_typed<QFormat::Int4, S, R>(A, x, pdl, stream, one_unit_a_wait);
  if (f == QFormat::Int8) return launch_typed<QFormat::Int8, S, R>(A, x, pdl, stream, one_unit_a_wait);
  return launch_typed<QFormat::Fp8, S, R>(A, x, pdl, stream, one_unit_a_wait);
}

}  // namespace

bool qgemv_staged_fits(QFormat f, int n, int64_t k) { return plan_staged(f, false, false, n, k, 1).ring == 8; }
bool qgemv_staged_fits_plain(QFormat f, int n, int64_t k) { return plan_staged(f, false, true, n, k, 1).ring > 0; }
bool qgemv_staged_takes(QFormat f, bool glu, bool norm, int n, int64_t k) {
  return plan_staged(f, glu, !glu && !norm, n, k).ring > 0;
}
int qgemv_staged_cluster(QFormat f, bool glu, bool norm, int n, int64_t k) {
  const StagedPlan p = plan_staged(f, glu, !glu && !norm, n, k);
  return p.ring > 0 ? p.cluster : 0;
}
bool qgemv_clusters_allowed() { return clusters_allowed(); }
bool qgemv_staged_cluster_fits(QFormat f, bool glu, int n, int64_t k, int cluster) {
  return cluster > 1 && plan_staged(f, glu, !glu, n, k, cluster).ring > 0;
}

namespace {

// How launch_qgemv_staged runs a problem: the plan, the x staging and the ring (0: not staged).
struct StagedChoice {
  StagedPlan plan;
  XStage x = XStage::Plain;
  int ring = 0;
  bool one_row_r4 = false;
};

StagedChoice choose_staged(QFormat f, bool glu, bool norm, int n, int64_t k, int cluster) {
  StagedChoice c;
  c.plan = plan_staged(f, glu, !glu && !norm, n, k, cluster);
  if (c.plan.ring == 0) return c;
  static const bool norm_one = [] {
    const char* e = std::getenv("EMBER_CUDA_QGEMV_NORM_ONE");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  // NormOne: one round of stage_x_norm_one's kNormOneB chunks a lane covers at most 4096
  // elements over 8 warps. EMBER_CUDA_QGEMV_NORM_ONE=0 keeps Norm there (A/B runs).
  if (norm)
    c.x = norm_one && n == 1 && c.plan.cluster == 1 && qweight_k_pad(f, k) <= 4096 ? XStage::NormOne : XStage::Norm;
  // int4 at one batch row whose tile is at most four units a warp (k <= 4096: q/k/v, o, lm_head
  // of Llama-3-8B): the 4-unit ring holds all of it, as the 8-unit one does (half of that stays
  // unused), in half the shared memory, and with one unit a wait the kernel takes 80 registers
  // (94 with two), so three blocks fit an SM instead of two: q/k/v's 384 tiles run in one wave
  // (264 blocks took two). H200, batch-1 int4, one call (session 29 call 5): 538.3 / 537.4 tok/s
  // without, 551.4 / 551.6 with; only with the norm folded (q/k/v) 532.7 / 532.3, only without
  // (o, lm_head) 539.7 / 540.0, so the two together and not either alone.
  // EMBER_CUDA_QGEMV_R4 (A/B runs): 0 never, 2 only with the norm folded, 3 only without.
  static const int r4 = qgemm_detail::env_int("EMBER_CUDA_QGEMV_R4", 1);
  // fp8 / int8 at one batch row with the norm folded (q/k/v, k <= 4096): a tile is 8 units a warp,
  // so the 4-unit ring takes two rounds, but with 64 registers (one unit a wait) and ~50 KB of
  // shared memory four blocks fit an SM: q/k/v's 384 tiles in one wave of 528 blocks, with as many
  // bytes in flight an SM as two blocks of the 8-unit ring. H200, batch-1 tok/s, the same binary
  // with EMBER_CUDA_QGEMV_R4B=0 -> with it (session 30 call 6): int8 411.3 / 410.0 -> 418.9 /
  // 417.5, fp8 398.0 / 398.1 -> 400.1 / 400.3. The o GEMV and lm_head without the norm lost on it
  // (call 1: fp8 391.5, int8 397.0 against 396.1, 409.4), and down too (fp8 384.4).
  // EMBER_CUDA_QGEMV_R4B (A/B runs): 0 never, 2 (default) with the norm folded, 3 without (o,
  // lm_head), 1 both, 4 both and every plain one-row GEMV (down).
  static const int r4b = qgemm_detail::env_int("EMBER_CUDA_QGEMV_R4B", 2);
  const int r4_setting = f == QFormat::Int4 ? r4 : r4b;
  const int r4_max_units = f == QFormat::Int4 ? kWarps * 4 : r4b == 4 ? units_of(f, k) : kWarps * 8;
  c.one_row_r4 = !glu && n == 1 && c.plan.cluster == 1 && ring4_setting_takes(r4_setting, c.x) &&
                 units_of(f, k) <= r4_max_units;
  c.ring = c.one_row_r4 ? 4 : c.plan.ring;
  return c;
}

// Whether a plain GEMV of n rows (norm: folded) that choose_staged placed as c runs on the
// prefetching kernel.
bool prefetch_kernel_takes(const StagedChoice& c, int n, bool norm) {
  return !norm && n == 1 && c.plan.ring == 8 && c.plan.cluster == 1 && c.x == XStage::Plain && c.ring == 8 &&
         two_units_a_wait(1);
}

// Whether a plain GEMV placed as c runs on the gated kernel of its format (launch_gate_staged).
bool gate_kernel_takes(const StagedChoice& c, QFormat f, int n, bool norm) {
  if (norm || n != 1 || c.plan.cluster != 1 || c.x != XStage::Plain) return false;
  return f == QFormat::Int4 ? c.one_row_r4 && c.ring == 4 : c.ring == 8 && c.plan.ring == 8 && two_units_a_wait(1);
}

// The grid of a kernel below (one row, no cluster): its tiles, at most the blocks the GPU holds at
// once with a `ring`-unit ring and x in shared memory (smem, set); 0 where none fits.
// (one_block: at one block an SM, one_block_smem, for a kernel of S streams.)
template <typename K>
int one_wave_grid(K kernel, QFormat f, int ring, const SArgs& A, size_t& smem, bool one_block = false, int S = 1) {
  smem = staged_smem(f, ring, A.n, A.k);
  if (one_block) smem = one_block_smem(smem, S);
  const int resident = resident_blocks(kernel, smem, max_smem(f), 1);
  return resident <= 0 ? 0 : A.n_tiles < resident ? A.n_tiles : resident;
}

// The kernels that prefetch the next GEMV's weights (kNext): one row, no norm, the 8-unit ring,
// two units a wait (qgemv_staged_prefetch_path). (Referenced here, before the rope's, so that
// their code lands after every other kernel's: see launch_rope_staged.)
cudaError_t launch_next_staged(QFormat f, SArgsNext A, bool pdl, cudaStream_t stream) {
  auto kernel = f == QFormat::Int4   ? qgemv_staged_kernel<QFormat::Int4, 1, 2, 8, false, XStage::Plain, false, true>
                : f == QFormat::Int8 ? qgemv_staged_kernel<QFormat::Int8, 1, 2, 8, false, XStage::Plain, false, true>
                                     : qgemv_staged_kernel<QFormat::Fp8, 1, 2, 8, false, XStage::Plain, false, true>;
  size_t smem = 0;
  const int grid = one_wave_grid(kernel, f, 8, A, smem);
  if (grid == 0) return cudaErrorInvalidConfiguration;
  A.next = l2_prefetch_plan(A.next, static_cast<uint32_t>(grid));
  return launch_kernel(kernel, dim3(grid), dim3(kWarps * 32), smem, stream, pdl, A);
}

// The kernels whose first copies wait at a start gate (kGate): one row, no norm, no cluster, int4
// on the 4-unit ring one unit a wait, fp8 / int8 on the 8-unit ring two units a wait (where
// choose_staged puts an o projection: gate_kernel_takes). (Referenced here too, for the same
// reason.)
cudaError_t launch_gate_staged(QFormat f, const SArgsGate& A, bool pdl, cudaStream_t stream) {
  const bool one = gate_one_block(f);
  if (A.n_segs == 1 && gate_twin_on(f)) {
    // (int4: the 8-unit ring, both 16-row tiles whole; fp8: 12 units, 6 of each tile's 8 a warp)
    constexpr XStage kX = XStage::Plain;
    auto kernel = qgemv_staged_kernel<QFormat::Int4, 2, 1, 8, false, kX, false, false, true, false, true>;
    if (f == QFormat::Fp8) kernel = qgemv_staged_kernel<QFormat::Fp8, 2, 1, 12, false, kX, false, false, true, false, true>;
    const int ring = f == QFormat::Fp8 ? 12 : 8;
    SArgsGate T = A;
    T.n_tiles = T.tile_end[0] = static_cast<int>((A.m[0] + 31) / 32);
    const int per_round = kWarps * ring / 2;  // units of a tile per pipeline round (S = 2)
    T.n_chunks = (T.units_local + per_round - 1) / per_round;
    size_t smem = 0;
    const int grid = one_wave_grid(kernel, f, ring, T, smem, /*one_block=*/true, /*S=*/2);
    if (grid == 0) return cudaErrorInvalidConfiguration;
    return launch_kernel(kernel, dim3(grid), dim3(kWarps * 32), smem, stream, pdl, T);
  }
  if (tma_ring_on(f, kTmaGate)) {
    cudaError_t err = cudaSuccess;
    if (f == QFormat::Int4 && launch_tma<QFormat::Int4, 1, 1, 4, XStage::Plain, false, true>(A, pdl, stream, err, one))
      return err;
    if (f == QFormat::Fp8 && launch_tma<QFormat::Fp8, 1, 2, 8, XStage::Plain, false, true>(A, pdl, stream, err, one))
      return err;
  }
  auto kernel = f == QFormat::Int4 ? qgemv_staged_kernel<QFormat::Int4, 1, 1, 4, false, XStage::Plain, false, false, true>
                : f == QFormat::Int8
                    ? qgemv_staged_kernel<QFormat::Int8, 1, 2, 8, false, XStage::Plain, false, false, true>
                    : qgemv_staged_kernel<QFormat::Fp8, 1, 2, 8, false, XStage::Plain, false, false, true>;
  size_t smem = 0;
  const int grid = one_wave_grid(kernel, f, f == QFormat::Int4 ? 4 : 8, A, smem, one);
  if (grid == 0) return cudaErrorInvalidConfiguration;
  return launch_kernel(kernel, dim3(grid), dim3(kWarps * 32), smem, stream, pdl, A);
}

// The rope epilogue's kernels (kRope): one row, the 4-unit ring, one unit a wait, the norm staged
// at once (qgemv_staged_rope_path). (Referenced here, before launch_s instantiates the others, so
// that their code lands after those kernels' in the module and moves none of them: see
// docs/CUDA_NOTES.md "Session 30" on code placement.)
cudaError_t launch_rope_staged(QFormat f, const SArgsRope& A, bool pdl, cudaStream_t stream) {
  if (tma_ring_on(f, kTmaRope)) {
    cudaError_t err = cudaSuccess;
    if (f == QFormat::Int4 && launch_tma<QFormat::Int4, 1, 1, 4, XStage::NormOne, true>(A, pdl, stream, err))
      return err;
    if (f == QFormat::Fp8 && launch_tma<QFormat::Fp8, 1, 1, 4, XStage::NormOne, true>(A, pdl, stream, err))
      return err;
  }
  auto kernel = f == QFormat::Int4  ? qgemv_staged_kernel<QFormat::Int4, 1, 1, 4, false, XStage::NormOne, true>
                : f == QFormat::Int8 ? qgemv_staged_kernel<QFormat::Int8, 1, 1, 4, false, XStage::NormOne, true>
                                     : qgemv_staged_kernel<QFormat::Fp8, 1, 1, 4, false, XStage::NormOne, true>;
  size_t smem = 0;
  const int grid = one_wave_grid(kernel, f, 4, A, smem);
  if (grid == 0) return cudaErrorInvalidConfiguration;
  return launch_kernel(kernel, dim3(grid), dim3(kWarps * 32), smem, stream, pdl, A);
}

}  // namespace

bool qgemv_staged_rope_path(QFormat f, int n, int64_t k, bool norm) {
  const StagedChoice c = choose_staged(f, false, norm, n, k, 0);
  return norm && n == 1 && c.plan.ring > 0 && c.plan.cluster == 1 && c.x == XStage::NormOne && c.one_row_r4;
}

bool qgemv_staged_prefetch_path(QFormat f, int n, int64_t k, bool norm) {
  return prefetch_kernel_takes(choose_staged(f, false, norm, n, k, 0), n, norm);
}

bool qgemv_staged_gate_twin(QFormat f) { return gate_twin_on(f); }

bool qgemv_staged_gate_path(QFormat f, int n, int64_t k, bool norm) {
  return gate_kernel_takes(choose_staged(f, false, norm, n, k, 0), f, n, norm);
}

cudaError_t launch_qgemv_staged(QFormat f, const QGemvProblem& p, bool glu, bool pdl, cudaStream_t stream,
                                const GemvRope* rope_args, const L2Prefetch* prefetch, const HoldGateUse* gate) {
  const StagedChoice c = choose_staged(f, glu, p.norm.w != nullptr, p.n, p.k, p.cluster);
  if (c.plan.ring == 0) return cudaErrorInvalidValue;
  const bool rope = rope_args && rope_args->head_dim > 0;
  if (rope && (glu || p.n_segs != 3 || rope_args->head_dim % 16 != 0 ||
               !qgemv_staged_rope_path(f, p.n, p.k, p.norm.w != nullptr)))
    return cudaErrorInvalidValue;
  const StagedPlan plan = c.plan;
  const XStage x = c.x;
  const bool one_row_r4 = c.one_row_r4;
  const int ring = c.ring;
  SArgs A;
  static_cast<QGemvProblem&>(A) = p;
  A.cluster = plan.cluster;
  A.units_local = units_per_rank(f, p.k, plan.cluster);
  A.x_stride = staged_x_stride(f, A.units_local);
  const int per_round = kWarps * ring / (glu ? 2 : 1);  // units of a tile per pipeline round
  A.n_chunks = (A.units_local + per_round - 1) / per_round;
  if (rope) {
    SArgsRope R;
    static_cast<SArgs&>(R) = A;
    R.rope = *rope_args;
    return launch_rope_staged(f, R, pdl, stream);
  }
  if (prefetch && !l2_prefetch_valid(*prefetch)) return cudaErrorInvalidValue;  // (the caller's bug, not ignored)
  if (prefetch && prefetch->n > 0 && !glu && p.cluster == 0 && prefetch_kernel_takes(c, p.n, p.norm.w != nullptr)) {
    SArgsNext N;
    static_cast<SArgs&>(N) = A;
    N.next = *prefetch;
    return launch_next_staged(f, N, pdl, stream);  // (which plans the slices for its grid)
  }
  if (gate && gate->words && !glu && p.cluster == 0 && gate_kernel_takes(c, f, p.n, p.norm.w != nullptr)) {
    SArgsGate G;
    static_cast<SArgs&>(G) = A;
    G.gate = gate->words;
    G.gate_arrivals = gate->arrivals;
    return launch_gate_staged(f, G, pdl, stream);
  }
  if (glu) return launch_s<2, 8>(f, A, x, pdl, stream);
  return ring == 4 ? launch_s<1, 4>(f, A, x, pdl, stream, /*one_unit_a_wait=*/one_row_r4)
                   : launch_s<1, 8>(f, A, x, pdl, stream);
}

}  // namespace ember::cuda
