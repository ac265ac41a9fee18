// BF16-weight GEMV. One warp (or KS warps, each taking every KS-th slab of 32 * U chunks)
// owns R output rows; each lane streams 16-byte chunks (8 bf16) of those rows with U chunks
// per row in flight before the first use, so a warp keeps R * U * 512 bytes of weight loads
// outstanding; x (F32, at most 4 * k * 4 bytes) is read
// through L1, where every warp of the SM finds it, or staged in shared memory. The grid has
// one task per warp (no persistent loop): tasks are short, so the block scheduler balances the
// tail. Up to kGemvMaxSegs matrices sharing x form one grid (fused q/k/v or gate/up), and in
// GLU mode each warp reads the same rows of the gate and the up matrix and writes
// act(gate) * up. With programmatic dependent launch the next kernel's blocks start (and
// stream their first weights) while this one drains, which hides most of the per-kernel ramp
// of a decode step.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/hold_gate.cuh"
#include "backend/cuda/l2_prefetch.cuh"
#include "backend/cuda/probe.cuh"
#include "backend/cuda/rope_epilogue.cuh"
#include "backend/cuda/smem_limit.h"

#include <mutex>
#include <type_traits>
#include <vector>

namespace ember::cuda {

namespace {

constexpr int kWarps = 8;

// Dot product of 8 bf16 (packed in w) with 8 floats (x0, x1).
__device__ __forceinline__ float dot8(uint4 w, float4 x0, float4 x1) {
  float s = bf16_lo(w.x) * x0.x;
  s = fmaf(bf16_hi(w.x), x0.y, s);
  s = fmaf(bf16_lo(w.y), x0.z, s);
  s = fmaf(bf16_hi(w.y), x0.w, s);
  s = fmaf(bf16_lo(w.z), x1.x, s);
  s = fmaf(bf16_hi(w.z), x1.y, s);
  s = fmaf(bf16_lo(w.w), x1.z, s);
  s = fmaf(bf16_hi(w.w), x1.w, s);
  return s;
}

struct MultiArgs {
  const uint16_t* w[kGemvMaxSegs] = {};
  const float* bias[kGemvMaxSegs] = {};
  float* out[kGemvMaxSegs] = {};
  int64_t m[kGemvMaxSegs] = {};
  int64_t task_end[kGemvMaxSegs] = {};  // cumulative warp tasks of segments 0..s
  int n_segs = 0;
  int64_t n_tasks = 0;
  const float* x = nullptr;
  int64_t k = 0;
  // GLU mode: w[0] gate, w[1] up (task_end over w[0] only).
  float* glu_out = nullptr;
  float* gate_out = nullptr;
  float* up_out = nullptr;
  bool gelu = false;
};

// The rope epilogue's kernel (kRope) takes the rope's arguments too; the others keep MultiArgs
// alone (launch arguments a kernel does not use have cost batch-1 speed before: CUDA_NOTES
// session 29).
struct MultiArgsRope : MultiArgs {
  GemvRope rope;
};
// Likewise the kernel that prefetches the next GEMV's weights into L2 (kNext): the blocks from
// next_first_block on (the last wave, resident as the grid drains) each take a slice.
struct MultiArgsNext : MultiArgs {
  L2Prefetch next;
  int64_t next_first_block = 0;
};
// Likewise the held o GEMV's start gate (hold_gate.cuh: HoldGateUse).
struct MultiArgsGate : MultiArgs {
  uint32_t* gate = nullptr;
  int gate_arrivals = 0;
  int gate_parts = 3;  // what waits at it: bit 0 the register rows' loads, bit 1 the shared-memory copy
};
template <bool kRope, bool kNext = false>
using GemvArgs = std::conditional_t<kRope, MultiArgsRope, std::conditional_t<kNext, MultiArgsNext, MultiArgs>>;


// Batch-1 plain GEMVs at four blocks an SM (64 registers; 70 gave three): more of a grid of
// 1,024-1,536 blocks is resident, streaming its rows, when the previous kernel drains (H200,
// session 26: batch-1 bf16 235.5 -> 236.6 tok/s in three alternated pairs, down 32 -> 30.5 us).
// kRope (N == 1, R == 2, KS > 1, three segments q, k, v): the rope + K/V store epilogue
// (rope_epilogue.h); a warp task of q or k takes rows i and D/2 + i of a head, the rotated pair.
// kNext (variant 7 at one row): the L2 prefetch of the next GEMV's weights (L2Prefetch), by the
// grid's last blocks after their wait (when 2) or after their sums (0, 1).
template <int N, int R, int U, bool kSmemX, bool kGlu, int KS, bool kRope = false, bool kNext = false>
__global__ void __launch_bounds__(kWarps * 32, (N == 1 && !kGlu) ? 4 : 1)
    gemv_bf16_kernel(const GemvArgs<kRope, kNext> A) {
  static_assert(!kRope || (N == 1 && R == 2 && KS > 1 && !kGlu), "the rope epilogue: one row, two rows a warp");
  static_assert(!kNext || (N == 1 && R == 2 && KS == 4 && !kGlu && !kRope), "the prefetch: variant 7 at one row");
  constexpr int RR = kGlu ? 2 * R : R;  // weight rows per warp (gate rows, then up rows)
  constexpr bool kAllWarps = kSmemX || KS > 1;  // every warp reaches the block barriers
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int kpart = warp % KS;  // which slabs of the rows this warp takes
  EMBER_PROBE_MARK(4, 0, kGlu, A.n_tasks, A.k);
  int64_t task = blockIdx.x * int64_t{kWarps / KS} + warp / KS;
  const bool active = task < A.n_tasks;
  // (idle warps that must reach a barrier redo the last task and store nothing)
  if (!active) {
    if constexpr (!kAllWarps) return;
    task = A.n_tasks - 1;
  }
  // The segment of this task, selected with constant indices (no local-memory copy of A).
  const uint16_t* w = A.w[0];
  const float* bias = A.bias[0];
  float* out = A.out[0];
  int64_t m = A.m[0], t0 = 0;
  int seg = 0;
#pragma unroll
  for (int s = 1; s < kGemvMaxSegs; ++s) {
    if (!kGlu && s < A.n_segs && task >= A.task_end[s - 1]) {
      w = A.w[s];
      bias = A.bias[s];
      out = A.out[s];
      m = A.m[s];
      t0 = A.task_end[s - 1];
      seg = s;
    }
  }
  const int64_t k = A.k;
  const int64_t row0 = (task - t0) * R;
  const int64_t k8 = k / 8;  // 16-byte chunks per row
  // kRope, q and k: pair p = task - t0 is rows i and D/2 + i of head p / (D/2), i = p % (D/2).
  int64_t row_step = 1, rope_row0 = row0;
  float rope_pos = 0.0f, rope_freq = 0.0f;
  int32_t rope_slot = -1;
  if constexpr (kRope) {
    const int half = A.rope.head_dim / 2;
    const int64_t p = task - t0;
    if (seg < 2) {
      rope_row0 = p / half * (2 * half) + p % half;
      row_step = half;
    }
    // (step metadata and model constants, loaded before the PDL wait for the epilogue)
    if (active && kpart == 0 && lane == 0) {
      rope_pos = static_cast<float>(A.rope.positions[0]);
      if (seg < 2) rope_freq = A.rope.inv_freq[p % half];
      if (seg > 0) rope_slot = A.rope.slots[0];
    }
  }
  const uint4* wr[RR];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    // Rows past m (last warp of a segment only) re-read row m - 1 and are never stored.
    const int64_t rr = kRope ? rope_row0 + r * row_step : row0 + r;
    const int64_t row = rr < m ? rr : m - 1;
    wr[r] = reinterpret_cast<const uint4*>(w + row * k);
    if constexpr (kGlu) wr[R + r] = reinterpret_cast<const uint4*>(A.w[1] + row * k);
  }
  float acc[RR][N];
#pragma unroll
  for (int r = 0; r < RR; ++r)
#pragma unroll
    for (int j = 0; j < N; ++j) acc[r][j] = 0.0f;

  // The first loads touch only weights, so under programmatic dependent launch they are
  // issued while the previous kernel (the producer of x) drains; x is read after the wait.
  uint4 wv[RR][U];
  auto load = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = base + u * 32;
#pragma unroll
      for (int r = 0; r < RR; ++r)
        wv[r][u] = idx < k8 ? load_stream_16(wr[r] + idx) : make_uint4(0, 0, 0, 0);
    }
  };
  constexpr int kSlab = 32 * U;  // chunks a warp step covers
  const int64_t first = lane + int64_t{kpart} * kSlab;
  load(first);
  pdl_wait();  // no-op without a dependency
  EMBER_PROBE_MARK(4, 2, kGlu, A.n_tasks, A.k);
  pdl_launch_dependents();
  // (kNext: thread 0 of each block from next_first_block on asks for its slice)
  if constexpr (kNext) {
    if (A.next.when == 2 && threadIdx.x == 0 && blockIdx.x >= A.next_first_block)
      l2_prefetch_slice(A.next, static_cast<uint32_t>(blockIdx.x - A.next_first_block));
  }
  const float* x = A.x;
  extern __shared__ float4 s_x[];  // [N * k / 4] when kSmemX
  if constexpr (kSmemX) {
    const float4* xg = reinterpret_cast<const float4*>(x);
    for (int64_t i = threadIdx.x; i < N * k / 4; i += blockDim.x) s_x[i] = xg[i];
    __syncthreads();
  }
  for (int64_t base = first; base < k8; base += kSlab * KS) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = base + u * 32;
      if (idx < k8) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
          float4 x0, x1;
          if constexpr (kSmemX) {
            x0 = s_x[(j * k) / 4 + idx * 2];
            x1 = s_x[(j * k) / 4 + idx * 2 + 1];
          } else {
            const float4* xp = reinterpret_cast<const float4*>(x + j * k) + idx * 2;
            x0 = __ldg(xp);
            x1 = __ldg(xp + 1);
          }
#pragma unroll
          for (int r = 0; r < RR; ++r) acc[r][j] += dot8(wv[r][u], x0, x1);
        }
      }
    }
    if (base + kSlab * KS < k8) load(base + kSlab * KS);
  }
  if constexpr (KS > 1) {
    // The KS warps of a row group add their sums in a fixed order (warp kpart 0 stores).
    __shared__ float s_part[kWarps][RR][N];
#pragma unroll
    for (int r = 0; r < RR; ++r)
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const float part = warp_sum(acc[r][j]);
        if (lane == 0) s_part[warp][r][j] = part;
      }
    __syncthreads();
    if (kpart != 0) return;
#pragma unroll
    for (int r = 0; r < RR; ++r)
#pragma unroll
      for (int j = 0; j < N; ++j) {
        float sum = s_part[warp][r][j];
#pragma unroll
        for (int p = 1; p < KS; ++p) sum += s_part[warp + p][r][j];
        acc[r][j] = sum;  // (no warp_sum below: lane 0, which stores, holds the total)
      }
  }
  EMBER_PROBE_MARK(4, 6, kGlu, A.n_tasks, A.k);
  if constexpr (kNext) {  // (when 0 as 1: a check inside the loop above made ptxas spill at 64 registers)
    if (A.next.when != 2 && threadIdx.x == 0 && blockIdx.x >= A.next_first_block)
      l2_prefetch_slice(A.next, static_cast<uint32_t>(blockIdx.x - A.next_first_block));
  }
  if (!active) return;
  if constexpr (kRope) {
    // launch_rope_kv_store's arithmetic (same sincosf, factor and expressions) on the pair's sums.
    if (lane != 0) return;
    const int64_t i0 = rope_row0, i1 = rope_row0 + row_step;
    float v0 = acc[0][0] + (bias ? bias[i0] : 0.0f), v1 = acc[1][0] + (bias ? bias[i1] : 0.0f);
    if (seg < 2) {
      float cs, sn;
      rope_cos_sin(A.rope, rope_pos, rope_freq, cs, sn);
      const float r0 = v0 * cs - v1 * sn, r1 = v0 * sn + v1 * cs;
      v0 = r0;
      v1 = r1;
    }
    out[i0] = v0;
    out[i1] = v1;
    if (seg > 0 && rope_slot >= 0) {
      const size_t c = static_cast<size_t>(rope_slot) * m;  // (k and v rows: whole kv heads)
      rope_cache_store(A.rope, seg, c + i0, v0);
      rope_cache_store(A.rope, seg, c + i1, v1);
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const float v = KS > 1 ? acc[r][j] : warp_sum(acc[r][j]);
        if constexpr (kGlu) {
          const float u = KS > 1 ? acc[R + r][j] : warp_sum(acc[R + r][j]);
          if (lane == 0 && row0 + r < m) {
            const int64_t i = j * m + row0 + r;
            if (A.gate_out) A.gate_out[i] = v;
            if (A.up_out) A.up_out[i] = u;
            A.glu_out[i] = glu_act(v, A.gelu) * u;
          }
        } else {
          if (lane == 0 && row0 + r < m) out[j * m + row0 + r] = v + (bias ? bias[row0 + r] : 0.0f);
        }
      }
  }
}

// One-row GEMV whose blocks hold all of their weights before the PDL wait (variants 10, 11): a block
// takes 4 + 2 S rows, the first 4 as variant 7 (two rows a warp, four warps a row pair, each
// lane's chunks in registers) and the other 2 S copied whole into shared memory by one bulk copy
// (the TMA engine) issued before the wait. At 4 blocks an SM (S = 2) or fewer blocks of more rows
// (S = 3, room for the previous kernel's blocks), a 4096-row matrix is one wave, so all of it
// streams while the previous kernel runs: a batch-1 step's o projection after its attention,
// which occupies 8 SMs and leaves DRAM idle (variant 7 holds about half of it, in the first
// wave's registers). Only for N == 1, one matrix, and when the grid fits at once.
// kGate: the blocks wait at the start gate (hold_gate.cuh) before the loads gate_parts names.
template <int S, bool kGate = false>
__global__ void __launch_bounds__(kWarps * 32, 4)
    gemv_bf16_hold_kernel(const std::conditional_t<kGate, MultiArgsGate, MultiArgs> A) {
  constexpr int R = 2, U = 4, KS = 4;
  EMBER_PROBE_MARK(4, 0, 0, A.m[0], A.k);
  constexpr int kRegRows = 2 * R, kRows = kRegRows + 2 * S;  // a block's
  constexpr int RR = R + S;  // a warp's register rows, then its shared-memory rows
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int kpart = warp % KS, task = warp / KS;
  const int64_t m = A.m[0], k = A.k, k8 = k / 8;
  const uint16_t* w = A.w[0];
  const int64_t reg_row0 = blockIdx.x * int64_t{kRows} + task * R;
  const int64_t smem_row0 = blockIdx.x * int64_t{kRows} + kRegRows;
  extern __shared__ __align__(128) uint4 s_w[];  // [2 S][k8]
  __shared__ __align__(8) uint64_t s_bar;
  // The copy of the shared-memory rows (thread 0), at entry or (gated) past the gate.
  const auto issue_bulk = [&] {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const auto bar = static_cast<uint32_t>(__cvta_generic_to_shared(&s_bar));
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
      const int64_t rows = m - smem_row0 < 2 * S ? m - smem_row0 : 2 * S;
      if (rows > 0) {
        const auto bytes = static_cast<uint32_t>(rows * k * 2);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
            "%4;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(s_w))),
            "l"(w + smem_row0 * k), "r"(bytes), "r"(bar), "l"(l2_weights_policy())
            : "memory");
      } else {
        asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
      }
    }
#endif
  };
  // kGate: bit 0 of gate_parts holds the register rows' loads at the gate, bit 1 the copy.
  int parts = 0;
  if constexpr (kGate) parts = A.gate_parts;
  if (!(parts & 2)) issue_bulk();
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    // Rows past m re-read row m - 1 and are never stored.
    const int64_t row = reg_row0 + r < m ? reg_row0 + r : m - 1;
    wr[r] = reinterpret_cast<const uint4*>(w + row * k);
  }
  float acc[RR];
#pragma unroll
  for (int r = 0; r < RR; ++r) acc[r] = 0.0f;
  uint4 wv[R][U];
  auto load = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = base + u * 32;
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r][u] = idx < k8 ? load_stream_16(wr[r] + idx) : make_uint4(0, 0, 0, 0);
    }
  };
  constexpr int kSlab = 32 * U;
  const int64_t first = lane + int64_t{kpart} * kSlab;
  if (!(parts & 1)) load(first);
  if constexpr (kGate) {
    hold_gate_pass(A.gate, A.gate_arrivals);
    EMBER_PROBE_MARK(4, 1, 0, A.m[0], A.k);
    if (parts & 2) issue_bulk();
    if (parts & 1) load(first);
  }
  __syncthreads();  // the barrier's initialization, before any thread waits on it
  pdl_wait();
  EMBER_PROBE_MARK(4, 2, 0, A.m[0], A.k);
  pdl_launch_dependents();
  // Calls chunk(u, idx, x0, x1) for each of this lane's chunks (x0, x1: x's 8 floats there),
  // slab by slab, and slab_end(base) after each slab: the same order for both kinds of rows.
  auto sweep = [&](auto&& chunk, auto&& slab_end) {
    for (int64_t base = first; base < k8; base += kSlab * KS) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t idx = base + u * 32;
        if (idx < k8) {
          const float4* xp = reinterpret_cast<const float4*>(A.x) + idx * 2;
          chunk(u, idx, __ldg(xp), __ldg(xp + 1));
        }
      }
      slab_end(base);
    }
  };
  sweep(
      [&](int u, int64_t, float4 x0, float4 x1) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += dot8(wv[r][u], x0, x1);
      },
      [&](int64_t base) {
        if (base + kSlab * KS < k8) load(base + kSlab * KS);
      });
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto bar = static_cast<uint32_t>(__cvta_generic_to_shared(&s_bar));
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar)
                 : "memory");
  } while (!done);
#endif
  // Shared-memory rows: this warp's rows task * S + r of the block's copy, the same chunks.
  sweep(
      [&](int, int64_t idx, float4 x0, float4 x1) {
#pragma unroll
        for (int r = 0; r < S; ++r) acc[R + r] += dot8(s_w[(task * S + r) * k8 + idx], x0, x1);
      },
      [](int64_t) {});
  // The KS warps of a row group add their sums in a fixed order (warp kpart 0 stores).
  __shared__ float s_part[kWarps][RR];
#pragma unroll
  for (int r = 0; r < RR; ++r) {
    const float part = warp_sum(acc[r]);
    if (lane == 0) s_part[warp][r] = part;
  }
  __syncthreads();
  EMBER_PROBE_MARK(4, 6, 0, A.m[0], A.k);
  if (kpart != 0 || lane >= RR) return;
  float sum = s_part[warp][lane];
#pragma unroll
  for (int p = 1; p < KS; ++p) sum += s_part[warp + p][lane];
  const int64_t row = lane < R ? reg_row0 + lane : smem_row0 + task * S + (lane - R);
  if (row < m) A.out[0][row] = sum + (A.bias[0] ? A.bias[0][row] : 0.0f);
}

// Blocks of hold kernel S that one GPU holds at once with smem bytes of shared memory, cached
// per device (0 when it cannot run: before sm_90, or a query failed). The gated form (kGate) has
// its shared-memory limit raised here too, once, so that its launches need not.
template <int S>
int hold_resident_blocks(size_t smem) {
  struct Entry {
    int dev;
    size_t smem;
    int blocks;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache)
    if (e.dev == dev && e.smem == smem) return e.blocks;
  int major = 0, sms = 0, per_sm = 0;
  int blocks = 0;
  const void* kernel = reinterpret_cast<const void*>(gemv_bf16_hold_kernel<S>);
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9 &&
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
      raise_smem_limit(kernel, static_cast<int>(kGemvHoldMaxSmem)) == cudaSuccess &&
      raise_smem_limit(reinterpret_cast<const void*>(gemv_bf16_hold_kernel<S, true>),
                       static_cast<int>(kGemvHoldMaxSmem)) == cudaSuccess &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_bf16_hold_kernel<S>, kWarps * 32, smem) ==
          cudaSuccess)
    blocks = per_sm * sms;
  cache.push_back({dev, smem, blocks});
  return blocks;
}

// Hold kernel S's shared memory for A, or 0 when A's grid does not fit the GPU at once.
template <int S>
size_t hold_smem_if_fits(const MultiArgs& A) {
  const auto smem = static_cast<size_t>(2 * S * A.k) * 2;
  const int64_t grid = (A.m[0] + 4 + 2 * S - 1) / (4 + 2 * S);
  return static_cast<int64_t>(smem) <= kGemvHoldMaxSmem && grid <= hold_resident_blocks<S>(smem) ? smem : 0;
}

// Blocks of the prefetching kernel the GPU holds at once (cached per device).
int next_resident_blocks() {
  static std::mutex mu;
  static int known[64] = {};  // 0 unknown
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  std::lock_guard<std::mutex> lock(mu);
  if (known[dev] == 0) {
    int per_sm = 0, sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_bf16_kernel<1, 2, 4, false, false, 4, false, true>,
                                                      kWarps * 32, 0) != cudaSuccess)
      return 0;
    known[dev] = per_sm * sms;
  }
  return known[dev];
}

// The prefetching launch (variant 7's tiling at one row; gemv_prefetch_takes): the last
// next_resident_blocks() blocks of the grid ask for the slices. Referenced ahead of the rope's, so
// that its code lands after every other kernel's (below).
cudaError_t launch_next(MultiArgsNext& A, bool pdl, cudaStream_t stream) {
  constexpr int kTasks = kWarps / 4;
  const int64_t grid = (A.n_tasks + kTasks - 1) / kTasks;
  const int resident = next_resident_blocks();
  if (resident <= 0) return cudaErrorInvalidConfiguration;
  A.next_first_block = grid > resident ? grid - resident : 0;
  A.next = l2_prefetch_plan(A.next, static_cast<uint32_t>(grid - A.next_first_block));
  return launch_kernel(gemv_bf16_kernel<1, 2, 4, false, false, 4, false, true>, dim3(static_cast<unsigned>(grid)),
                       dim3(kWarps * 32), 0, stream, pdl, A);
}

// The rope epilogue's launch (variant 7's tiling at one row). Referenced here, ahead of the launch
// templates below, so that its code lands after the other kernels' in the module and moves none
// of them (docs/CUDA_NOTES.md "Session 30" on code placement).
cudaError_t launch_rope(const MultiArgsRope& A, bool pdl, cudaStream_t stream) {
  constexpr int kTasks = kWarps / 4;
  const auto grid = static_cast<unsigned>((A.n_tasks + kTasks - 1) / kTasks);
  return launch_kernel(gemv_bf16_kernel<1, 2, 4, false, false, 4, true>, dim3(grid), dim3(kWarps * 32), 0, stream, pdl,
                       A);
}

template <int S>
cudaError_t launch_hold(const MultiArgs& A, size_t smem, bool pdl, cudaStream_t stream, const HoldGateUse* gate) {
  const int64_t grid = (A.m[0] + 4 + 2 * S - 1) / (4 + 2 * S);
  if (gate && gate->words) {
    MultiArgsGate Ag;
    static_cast<MultiArgs&>(Ag) = A;
    Ag.gate = gate->words;
    Ag.gate_arrivals = gate->arrivals;
    Ag.gate_parts = gate->parts;
    return launch_kernel(gemv_bf16_hold_kernel<S, true>, dim3(static_cast<unsigned>(grid)), dim3(kWarps * 32), smem,
                         stream, pdl, Ag);
  }
  return launch_kernel(gemv_bf16_hold_kernel<S>, dim3(static_cast<unsigned>(grid)), dim3(kWarps * 32), smem, stream,
                       pdl, A);
}

template <int N, int R, int U, bool kSmemX, bool kGlu, int KS = 1>
cudaError_t launch(const MultiArgs& A, bool pdl, cudaStream_t stream) {
  auto kernel = gemv_bf16_kernel<N, R, U, kSmemX, kGlu, KS>;
  const size_t smem = kSmemX ? static_cast<size_t>(N * A.k) * sizeof(float) : 0;
  if constexpr (kSmemX) {
    if (static_cast<int64_t>(smem) > kGemvMaxSmemX) return cudaErrorInvalidValue;
    // Once per kernel and GPU: the limit, not this launch's size.
    const cudaError_t attr = raise_smem_limit(reinterpret_cast<const void*>(kernel), static_cast<int>(kGemvMaxSmemX));
    if (attr != cudaSuccess) return attr;
  }
  constexpr int kTasks = kWarps / KS;  // row groups a block covers
  const auto grid = static_cast<unsigned>((A.n_tasks + kTasks - 1) / kTasks);
  return launch_kernel(kernel, dim3(grid), dim3(kWarps * 32), smem, stream, pdl, A);
}

template <int N, bool kGlu>
cudaError_t launch_n(int variant, const MultiArgs& A, bool pdl, cudaStream_t stream, const HoldGateUse* gate = nullptr) {
  static_assert(kGemvVariants[0].rows_per_warp == 1 && kGemvVariants[0].unroll == 8);
  static_assert(kGemvVariants[1].rows_per_warp == 2 && kGemvVariants[1].unroll == 4);
  static_assert(kGemvVariants[2].rows_per_warp == 4 && kGemvVariants[2].unroll == 4);
  static_assert(kGemvVariants[3].rows_per_warp == 2 && kGemvVariants[3].unroll == 8);
  static_assert(kGemvVariants[4].rows_per_warp == 1 && kGemvVariants[4].unroll == 8);
  static_assert(kGemvVariants[5].rows_per_warp == 2 && kGemvVariants[5].unroll == 4);
  static_assert(kGemvVariants[6].rows_per_warp == 2 && kGemvVariants[6].unroll == 4 && kGemvVariants[6].k_splits == 2);
  static_assert(kGemvVariants[7].rows_per_warp == 2 && kGemvVariants[7].unroll == 4 && kGemvVariants[7].k_splits == 4);
  static_assert(kGemvVariants[8].rows_per_warp == 1 && kGemvVariants[8].unroll == 8 && kGemvVariants[8].k_splits == 2);
  static_assert(kGemvVariants[9].rows_per_warp == 1 && kGemvVariants[9].unroll == 8 && kGemvVariants[9].k_splits == 4);
  static_assert(kGemvVariants[10].rows_per_warp == 2 && kGemvVariants[10].unroll == 4 && kGemvVariants[10].k_splits == 4);
  static_assert(kGemvVariants[11].rows_per_warp == 2 && kGemvVariants[11].unroll == 4 && kGemvVariants[11].k_splits == 4);
  switch (variant) {
    case 0: return launch<N, 1, 8, false, kGlu>(A, pdl, stream);
    case 1: return launch<N, 2, 4, false, kGlu>(A, pdl, stream);
    case 5: return launch<N, 2, 4, true, kGlu>(A, pdl, stream);
    case 6: return launch<N, 2, 4, false, kGlu, 2>(A, pdl, stream);
    case 7: return launch<N, 2, 4, false, kGlu, 4>(A, pdl, stream);
    default: break;
  }
  if constexpr (!kGlu) {
    if (variant == kGemvHoldVariant || variant == kGemvHold2Variant) {
      // Only one row of x and one matrix whose blocks all fit at once; otherwise variant 7.
      if constexpr (N == 1) {
        if (A.n_segs == 1 && variant == kGemvHoldVariant)
          if (const size_t smem = hold_smem_if_fits<3>(A)) return launch_hold<3>(A, smem, pdl, stream, gate);
        if (A.n_segs == 1 && variant == kGemvHold2Variant)
          if (const size_t smem = hold_smem_if_fits<2>(A)) return launch_hold<2>(A, smem, pdl, stream, gate);
      }
      return launch<N, 2, 4, false, false, 4>(A, pdl, stream);
    }
    switch (variant) {
      case 2: return launch<N, 4, 4, false, false>(A, pdl, stream);
      case 3: return launch<N, 2, 8, false, false>(A, pdl, stream);
      case 4: return launch<N, 1, 8, true, false>(A, pdl, stream);
      case 8: return launch<N, 1, 8, false, false, 2>(A, pdl, stream);
      case 9: return launch<N, 1, 8, false, false, 4>(A, pdl, stream);
      default: break;
    }
  }
  return cudaErrorInvalidValue;
}

template <bool kGlu>
cudaError_t dispatch(int n, int variant, const MultiArgs& A, bool pdl, cudaStream_t stream, const HoldGateUse* gate = nullptr) {
  switch (n) {
    case 1: return launch_n<1, kGlu>(variant, A, pdl, stream, gate);
    case 2: return launch_n<2, kGlu>(variant, A, pdl, stream);
    case 3: return launch_n<3, kGlu>(variant, A, pdl, stream);
    case 4: return launch_n<4, kGlu>(variant, A, pdl, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool gemv_supported(int n, int64_t k, const void* x, const void* w) {
  return n >= 1 && n <= kGemvMaxBatch && k % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

bool gemv_hold_applies(int variant, int n, int64_t m, int64_t k) {
  MultiArgs A;
  A.m[0] = m;
  A.k = k;
  if (n != 1 || m < 1 || k % 8 != 0) return false;
  if (variant == kGemvHoldVariant) return hold_smem_if_fits<3>(A) != 0;
  if (variant == kGemvHold2Variant) return hold_smem_if_fits<2>(A) != 0;
  return false;
}

cudaError_t launch_gemv_bf16(const void* w, const float* x, const float* bias, float* out, int n,
                             int64_t m, int64_t k, int variant, bool pdl, cudaStream_t stream) {
  GemvSeg seg;
  seg.w = w;
  seg.bias = bias;
  seg.out = out;
  seg.m = m;
  return launch_gemv_bf16_multi(&seg, 1, x, n, k, variant, pdl, stream);
}

bool gemv_prefetch_takes(int variant, int n, int n_segs, int64_t m0, int64_t k) {
  // (the hold variants run variant 7 for more than one matrix or a grid that does not fit: launch_n)
  if (n != 1 || k % 8 != 0) return false;
  if (variant == kGemvHoldVariant || variant == kGemvHold2Variant) return n_segs > 1 || !gemv_hold_applies(variant, n, m0, k);
  return variant == 7;
}

bool gemv_rope_takes(const GemvSeg* segs, int n_segs, int n, int64_t k, int variant, int head_dim) {
  // (the hold variants run variant 7 for more than one matrix: launch_n)
  const bool as_7 = variant == 7 || variant == kGemvHoldVariant || variant == kGemvHold2Variant;
  if (n_segs != 3 || n != 1 || !as_7 || head_dim <= 0 || head_dim % 2 != 0 || k % 8 != 0) return false;
  for (int s = 0; s < 3; ++s)
    if (segs[s].m <= 0 || segs[s].m % head_dim != 0) return false;
  return segs[1].m == segs[2].m;
}

cudaError_t launch_gemv_bf16_multi(const GemvSeg* segs, int n_segs, const float* x, int n,
                                   int64_t k, int variant, bool pdl, cudaStream_t stream, const GemvRope* rope,
                                   const L2Prefetch* prefetch, const HoldGateUse* hold_gate) {
  if (n_segs < 1 || n_segs > kGemvMaxSegs || variant < 0 || variant >= kGemvNumVariants)
    return cudaErrorInvalidValue;
  if (prefetch && !l2_prefetch_valid(*prefetch)) return cudaErrorInvalidValue;  // (the caller's bug, not ignored)
  const bool roped = rope && rope->head_dim > 0;
  if (roped && !gemv_rope_takes(segs, n_segs, n, k, variant, rope->head_dim)) return cudaErrorInvalidValue;
  const int R = kGemvVariants[variant].rows_per_warp;
  MultiArgs A;
  int64_t tasks = 0;
  int used = 0;
  for (int s = 0; s < n_segs; ++s) {
    if (segs[s].m == 0) continue;  // an empty matrix takes no tasks
    A.w[used] = static_cast<const uint16_t*>(segs[s].w);
    A.bias[used] = segs[s].bias;
    A.out[used] = segs[s].out;
    A.m[used] = segs[s].m;
    tasks += (segs[s].m + R - 1) / R;
    A.task_end[used] = tasks;
    ++used;
  }
  if (used == 0) return cudaSuccess;
  A.n_segs = used;
  A.n_tasks = tasks;
  A.x = x;
  A.k = k;
  if (roped) {  // (gemv_rope_takes: three segments, variant 7's two rows a task)
    MultiArgsRope Ar;
    static_cast<MultiArgs&>(Ar) = A;
    Ar.rope = *rope;
    return launch_rope(Ar, pdl, stream);
  }
  if (prefetch && prefetch->n > 0 && gemv_prefetch_takes(variant, n, used, A.m[0], k)) {
    MultiArgsNext An;
    static_cast<MultiArgs&>(An) = A;
    An.next = *prefetch;
    return launch_next(An, pdl, stream);
  }
  return dispatch<false>(n, variant, A, pdl, stream, hold_gate);
}

cudaError_t launch_gemv_bf16_glu(const void* w_gate, const void* w_up, const float* x, int n,
                                 int64_t m, int64_t k, bool gelu_tanh, float* out, float* gate_out,
                                 float* up_out, int variant, bool pdl, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  if (!gemv_glu_variant(variant)) return cudaErrorInvalidValue;
  const int R = kGemvVariants[variant].rows_per_warp;
  MultiArgs A;
  A.w[0] = static_cast<const uint16_t*>(w_gate);
  A.w[1] = static_cast<const uint16_t*>(w_up);
  A.m[0] = A.m[1] = m;
  A.n_segs = 1;
  A.n_tasks = A.task_end[0] = (m + R - 1) / R;
  A.x = x;
  A.k = k;
  A.glu_out = out;
  A.gate_out = gate_out == out ? nullptr : gate_out;
  A.up_out = up_out;
  A.gelu = gelu_tanh;
  return dispatch<true>(n, variant, A, pdl, stream);
}

}  // namespace ember::cuda
