// How long the latency-bound accesses of a batch-1 decode step take while weights stream from
// DRAM, by the path the weights take. Those accesses are dependent L2 hits: x staged after a PDL
// wait, a counter, a barrier's poll, the attention's Q and new key. Session 27's probe put such a
// trip at ~1.4 us once a GEMV's cp.async ring had filled the queues, and session 47's put 4-7 us
// on whichever attention phase overlapped the o weights' flood. If bulk copies (the TMA unit)
// leave that path free where the lanes' cp.async do not, a TMA-fed weight ring is the lever for
// every GEMV's staging and the attention; if not, neither that nor a persistent kernel's barriers
// escape the cost (docs/CUDA_NOTES.md, "Session 55").
//
//   bench_load_latency [reps]
//
// One block an SM, 8 loader warps and 1 probe warp. Each loader warp streams the weights the way
// the staged GEMV's warp does: block b takes 16-row tiles b, b + G, ... of a [rows, 2048-byte]
// matrix (k 4096 int4), warp w units w, w + 8, w + 16, w + 24 of a tile (a unit: 64 bytes of each
// of the 16 rows), 8 units in flight a warp (64 KiB an SM), L2 evict-first. The loaders' paths:
//   cpasync: each lane copies 16 bytes of rows g and g + 8 (cp.async.cg, one group a unit);
//   bulk:    16 lanes each copy one row's 64 bytes (cp.async.bulk onto the slot's mbarrier);
//   tma:     lane 0 copies the unit as one 64-byte x 16-row box (cp.async.bulk.tensor.2d).
// Placement "all": loaders on every SM; "others": on every SM but the probe's, so only the
// memory system beyond the SM is shared. The probe (block 0, warp 8, lane 0) waits ~30 us for the
// loaders to reach their rate, then times 16 batches of 16 dependent ld.global.cg over a 16 KiB
// ring of indices (L2 hits) and 8 batches of 8 dependent atom.global.add.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

namespace {

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

constexpr int kLoaders = 8;
constexpr int kRing = 8;        // units in flight a loader warp
constexpr int kRowBytes = 2048; // k 4096 int4
constexpr int kChase = 4096;    // indices in the probe's ring (16 KiB)
constexpr int kBatches = 16, kPerBatch = 16, kAtomBatches = 8, kPerAtomBatch = 8;

enum Mode : int { kNone = 0, kCpAsync = 1, kBulk = 2, kTma = 3 };

struct Args {
  CUtensorMap map;  // [rows, 2048] bytes, box 64 x 16
  const uint8_t* w;
  int64_t tiles;
  int mode;
  int skip_probe_sm;  // 1: block 0 (the probe's) loads nothing
  const uint32_t* chase;
  uint32_t* counter;
  long long* out;  // [kBatches + kAtomBatches] cycles per access, then the sink
};

__device__ __forceinline__ uint64_t evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "l"(pol) : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t b) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
}
__device__ __forceinline__ void mbar_wait(uint32_t b, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(b), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ uint32_t ld_cg(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__global__ void __launch_bounds__((kLoaders + 1) * 32, 1) latency_kernel(const __grid_constant__ Args A) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kLoaders][kRing];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (warp == kLoaders) {
    if (blockIdx.x != 0 || lane != 0) return;
    // The probe: warm its ring into L2, wait for the loaders' steady state, then time.
    uint32_t idx = 0;
    for (int i = 0; i < 2 * kChase; ++i) idx = ld_cg(A.chase + idx);
    const long long t_start = clock64();
    while (clock64() - t_start < 60000) {
    }
    for (int b = 0; b < kBatches; ++b) {
      const long long t0 = clock64();
#pragma unroll 1
      for (int i = 0; i < kPerBatch; ++i) idx = ld_cg(A.chase + idx);
      if (idx == 0xffffffffu) A.out[kBatches + kAtomBatches] = idx;  // (waits for idx before the clock)
      A.out[b] = (clock64() - t0) / kPerBatch;
    }
    uint32_t v = 0;
    for (int b = 0; b < kAtomBatches; ++b) {
      const long long t0 = clock64();
#pragma unroll 1
      for (int i = 0; i < kPerAtomBatch; ++i) v = atomicAdd(A.counter + (v >> 31), 1u);
      if (v == 0xffffffffu) A.out[kBatches + kAtomBatches] = v;
      A.out[kBatches + b] = (clock64() - t0) / kPerAtomBatch;
    }
    A.out[kBatches + kAtomBatches + 1] = idx;
    return;
  }
  if (A.mode == kNone || (A.skip_probe_sm && blockIdx.x == 0)) return;
  const int g = lane / 4, t = lane % 4;
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + warp * kRing * 1024;
  const uint32_t bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(&bars[warp][0]));
  const uint64_t pol = evict_first();
  if (A.mode != kCpAsync && lane == 0) {
    for (int s = 0; s < kRing; ++s) mbar_init(bar0 + 8 * s);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  // Unit i of this warp: tile blockIdx.x + (i / 4) * gridDim.x, unit warp + 8 (i % 4) of its rows.
  const int64_t n_units = (A.tiles - blockIdx.x + gridDim.x - 1) / gridDim.x * 4;
  auto issue = [&](int slot, int64_t i) {
    if (i < n_units) {
      const int64_t tile = blockIdx.x + (i / 4) * gridDim.x;
      const int ku = warp + kLoaders * static_cast<int>(i % 4);
      const uint32_t dst = ring + slot * 1024;
      const uint32_t bar = bar0 + 8 * slot;
      if (A.mode == kCpAsync) {
        const uint8_t* lo = A.w + (tile * 16 + g) * kRowBytes + ku * 64 + t * 16;
        cp16(dst + lane * 16, lo, pol);
        cp16(dst + 512 + lane * 16, lo + 8 * kRowBytes, pol);
      } else if (A.mode == kBulk) {
        if (lane == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 1024;" ::"r"(bar) : "memory");
        __syncwarp();
        if (lane < 16) {
          const uint8_t* src = A.w + (tile * 16 + lane) * kRowBytes + ku * 64;
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], 64, [%2], %3;" ::"r"(
                  dst + lane * 64),
              "l"(src), "r"(bar), "l"(pol)
              : "memory");
        }
      } else if (lane == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 1024;" ::"r"(bar) : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
            "%3}], [%4], %5;" ::"r"(dst),
            "l"(reinterpret_cast<uint64_t>(&A.map)), "r"(ku * 64), "r"(static_cast<int>(tile * 16)), "r"(bar), "l"(pol)
            : "memory");
      }
    }
    if (A.mode == kCpAsync) asm volatile("cp.async.commit_group;" ::: "memory");
  };
  for (int s = 0; s < kRing; ++s) issue(s, s);
  uint32_t acc = 0;
  for (int64_t i = 0; i < n_units; ++i) {
    const int slot = static_cast<int>(i % kRing);
    if (A.mode == kCpAsync) {
      asm volatile("cp.async.wait_group %0;" ::"n"(kRing - 1) : "memory");
    } else {
      mbar_wait(bar0 + 8 * slot, static_cast<uint32_t>((i / kRing) & 1));
    }
    acc ^= *reinterpret_cast<const uint32_t*>(smem + warp * kRing * 1024 + slot * 1024 + lane * 16);
    __syncwarp();  // every lane has read the slot before it is refilled
    issue(slot, i + kRing);
  }
  if (acc == 0x12345678u) A.out[kBatches + kAtomBatches] = acc;
}

long long median(std::vector<long long> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  int sms = 0, clock_khz = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const double ns_per_cycle = 1e6 / clock_khz;
  std::printf("device: %s, %d SMs, clock %.0f MHz (cycles -> ns at that clock)\n", prop.name, sms, clock_khz / 1e3);

  const int64_t rows = int64_t{1} << 20;  // 2 GiB: the loaders outlast the probe
  const int64_t tiles = rows / 16;
  uint8_t* w = nullptr;
  CK(cudaMalloc(&w, rows * kRowBytes));
  CK(cudaMemset(w, 0x5a, rows * kRowBytes));
  std::vector<uint32_t> perm(kChase);
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin() + 1, perm.end(), std::mt19937(7));
  std::vector<uint32_t> next(kChase);
  for (int i = 0; i < kChase; ++i) next[perm[i]] = perm[(i + 1) % kChase];  // one cycle through all
  uint32_t* chase = nullptr;
  uint32_t* counter = nullptr;
  long long* out = nullptr;
  CK(cudaMalloc(&chase, kChase * 4));
  CK(cudaMemcpy(chase, next.data(), kChase * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&counter, 64));
  CK(cudaMemset(counter, 0, 64));
  CK(cudaMalloc(&out, 64 * 8));

  Args A{};
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kRowBytes), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kRowBytes)};
  const cuuint32_t box[2] = {64, 16}, el[2] = {1, 1};
  const CUresult r = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)(
      &A.map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w, dims, strides, box, el, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", static_cast<int>(r));
    return 1;
  }
  A.w = w;
  A.tiles = tiles;
  A.chase = chase;
  A.counter = counter;
  A.out = out;
  // (150 KiB, of which the rings use 64: one block an SM, so that block 0's SM holds only the probe
  // where the placement says so)
  const size_t smem = 150 * 1024;
  CK(cudaFuncSetAttribute(latency_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const char* names[] = {"none", "cpasync", "bulk", "tma"};
  struct Config {
    int mode, skip;
  };
  const Config configs[] = {{kNone, 0}, {kCpAsync, 0}, {kBulk, 0}, {kTma, 0}, {kCpAsync, 1}, {kBulk, 1}, {kTma, 1}, {kNone, 0}};
  for (const Config& c : configs) {
    A.mode = c.mode;
    A.skip_probe_sm = c.skip;
    std::vector<long long> ld_all, at_all;
    std::vector<double> gbs;
    for (int rep = 0; rep < reps + 1; ++rep) {  // (the first rep warms up)
      CK(cudaEventRecord(e0));
      latency_kernel<<<sms, (kLoaders + 1) * 32, smem>>>(A);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      std::vector<long long> h(kBatches + kAtomBatches);
      CK(cudaMemcpy(h.data(), out, h.size() * 8, cudaMemcpyDeviceToHost));
      if (rep == 0) continue;
      ld_all.insert(ld_all.end(), h.begin(), h.begin() + kBatches);
      at_all.insert(at_all.end(), h.begin() + kBatches, h.end());
      const int loading_sms = c.mode == kNone ? 0 : sms - c.skip;
      const double bytes = static_cast<double>(tiles) * 16 * kRowBytes * loading_sms / sms;
      gbs.push_back(bytes / (ms * 1e-3) / 1e9);
    }
    std::sort(ld_all.begin(), ld_all.end());
    std::sort(at_all.begin(), at_all.end());
    std::sort(gbs.begin(), gbs.end());
    std::printf(
        "RESULT|latency|%s loaders on %s SMs|ld.cg L2 hit p50 %.0f ns (p90 %.0f, max %.0f), atomic p50 %.0f ns (p90 %.0f); "
        "loaders %.0f GB/s\n",
        names[c.mode], c.mode == kNone ? "no" : c.skip ? "the other" : "all", median(ld_all) * ns_per_cycle,
        ld_all[ld_all.size() * 9 / 10] * ns_per_cycle, ld_all.back() * ns_per_cycle, median(at_all) * ns_per_cycle,
        at_all[at_all.size() * 9 / 10] * ns_per_cycle, gbs[gbs.size() / 2]);
  }
  return 0;
}
