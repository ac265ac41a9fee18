// In-kernel timeline probe, a diagnostics build only (cmake -DEMBER_CUDA_PROBE=ON defines
// EMBER_PROBE; otherwise EMBER_PROBE_MARK is empty and no kernel changes): thread 0 of a block
// records (globaltimer, clock64, kind | point | index, SM, linear block id, m, k) at the marked
// points into a device buffer that every translation unit reaches through a host-side registry
// (no relocatable device code). Each block reserves 128 records at its first mark (point 0), one
// atomic a block. CudaBackend::launch_graph calls before_graph; bench/cuda/probe_summary.py
// reads the CSV. It found where a batch-1 decode layer's time goes (docs/CUDA_NOTES.md
// "Session 27"); the cost of the marks themselves is small but not nil, so compare probed runs
// with probed runs.
#pragma once

#include <cstdint>

#if defined(EMBER_PROBE) && defined(__CUDACC__)
#include <cuda_runtime.h>

#include <vector>

namespace ember::cuda::probe {

struct Rec {
  unsigned long long gt, clk;
  unsigned int tag, smblk, m, k;
};

using SetFn = void (*)(Rec*, unsigned int*, unsigned int);
inline std::vector<SetFn>& registry() {
  static std::vector<SetFn> r;
  return r;
}
inline int register_tu(SetFn f) {
  registry().push_back(f);
  return 0;
}

static __device__ Rec* g_buf = nullptr;
static __device__ unsigned int* g_count = nullptr;
static __device__ unsigned int g_cap = 0;

static void set_this_tu(Rec* b, unsigned int* c, unsigned int cap) {
  cudaMemcpyToSymbol(g_buf, &b, sizeof(b));
  cudaMemcpyToSymbol(g_count, &c, sizeof(c));
  cudaMemcpyToSymbol(g_cap, &cap, sizeof(cap));
}
static const int tu_registered = register_tu(&set_this_tu);

inline void set_all(Rec* b, unsigned int* c, unsigned int cap) {
  for (SetFn f : registry()) f(b, c, cap);
}

// kind: 1 staged packed GEMV, 2 16-bit decode attention, 4 BF16 GEMV, 5 register RMSNorm.
// ev: the point in the kernel (bench/cuda/probe_summary.py lists them). idx: a tile, or another
// index the kernel finds useful.
__device__ __forceinline__ void mark(unsigned kind, unsigned ev, unsigned idx, unsigned m, unsigned k) {
  // Each block reserves kPerBlock records at its first mark (ev 0), so one atomic a block.
  constexpr unsigned kPerBlock = 128;
  __shared__ unsigned s_base, s_n;
  Rec* b = g_buf;
  if (b == nullptr) return;
  unsigned long long gt, clk;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt));
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(clk));
  unsigned sm;
  asm("mov.u32 %0, %%smid;" : "=r"(sm));
  if (ev == 0) {
    s_base = atomicAdd(g_count, kPerBlock);
    s_n = 0;
  }
  const unsigned i = s_base + s_n;
  const unsigned blk = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);  // (linear)
  if (s_n < kPerBlock && i + 1 <= g_cap) b[i] = Rec{gt, clk, kind | (ev << 8) | (idx << 16), sm | (blk << 8), m, k};
  ++s_n;
}

}  // namespace ember::cuda::probe

#define EMBER_PROBE_MARK(kind, ev, idx, m, k)                                  \
  do {                                                                         \
    if (threadIdx.x == 0) ::ember::cuda::probe::mark(kind, ev, idx, m, k);     \
  } while (0)
#else
#define EMBER_PROBE_MARK(kind, ev, idx, m, k) \
  do {                                        \
  } while (0)
#endif

#ifdef EMBER_PROBE
#include <cuda_runtime.h>
namespace ember::cuda::probe {
// Called before each graph launch: EMBER_PROBE_AT=N records graph launches N and N + 1 (the GPU
// idle before N) and writes them as CSV to EMBER_PROBE_OUT at launch N + 2.
void before_graph(cudaStream_t stream);
}  // namespace ember::cuda::probe
#endif
