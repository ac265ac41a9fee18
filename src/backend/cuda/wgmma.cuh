#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a): shared-memory matrix descriptors, the 128-byte swizzle
// they read, and the fences around the asynchronous MMAs. The instruction wrappers themselves
// are generated (wgmma_ops.cuh). Device code here exists only in the sm_90a pass
// (EMBER_WGMMA_DEVICE); other targets see declarations that callers must not reach.
//
// Layout every operand here uses: a matrix of 16-bit values is stored as column blocks of 64
// values (128 bytes) each, [D / 64][rows][64]; inside a block, the 16-byte chunk c of row r is
// at chunk c ^ (r % 8) (the "128B swizzle"), and every 8-row group (1024 bytes) starts on a
// 1024-byte boundary. For Q K^T both operands are K-major (rows = query or key, K = head dim);
// for P V, V's rows are keys (K) and its columns head dims (N): the same bytes read N-major.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define EMBER_WGMMA_DEVICE 1
#endif

#include "backend/cuda/wgmma_ops.cuh"

#include <cstdint>

namespace ember::cuda::wg {

constexpr int kSwizzleBytes = 128;  // one row of a column block
constexpr int kAtomBytes = 1024;    // 8 rows: the swizzle's period

// Byte offset of 16-byte chunk c (0 .. D/8 - 1) of row r in a [D / 64][rows][64] matrix.
__device__ __forceinline__ uint32_t swizzled_offset(int rows, int r, int c) {
  return static_cast<uint32_t>(((c >> 3) * rows + r) * kSwizzleBytes + (((c & 7) ^ (r & 7)) << 4));
}

// Descriptor of a 128B-swizzled operand at shared address addr (1024-aligned but for the
// in-row k offset of K-major operands). lbo: bytes between 64-column blocks (N-major operands;
// K-major ones ignore it); sbo: bytes between 8-row groups.
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// desc(addr + off, lbo, sbo) from d = desc(addr, lbo, sbo): the address field is linear and,
// below 256 KiB of shared memory, never carries into the next field, so a 32-bit add does it.
__device__ __forceinline__ uint64_t desc_add(uint64_t d, uint32_t off) {
  const uint32_t lo = static_cast<uint32_t>(d) + (off >> 4), hi = static_cast<uint32_t>(d >> 32);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

#if defined(EMBER_WGMMA_DEVICE)
// Before the first MMA of a group: orders this thread's earlier register writes to the
// accumulators / A fragments before the asynchronous MMAs read them.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins the accumulators of MMAs in flight: the compiler does not see that wgmma.wait_group
// is what completes them, so without this it may move their reads (or writes) across it.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operands(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[i][e])::"memory");
}
// Shared memory written by ordinary stores or cp.async, read next by wgmma (the async proxy):
// each writing thread fences before the barrier that publishes it.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- mbarriers (shared memory, 8 bytes each) for producer / consumer warp roles ----
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` of bar has completed; kCluster: with acquire
// semantics at cluster scope (arrivals from other blocks of the cluster, mbar_arrive_rank0).
template <bool kCluster = false>
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    if constexpr (kCluster) {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
          "selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    } else {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    }
  } while (!done);
}
// Arrives (release, cluster scope) on the mbarrier at shared address bar of rank 0 of this
// block's cluster.
__device__ __forceinline__ void mbar_arrive_rank0(uint32_t bar) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(remote) : "r"(bar));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
// After mbar_init, before another thread or the async proxy (bulk copies) uses the barriers.
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Arrives on bar, expecting `bytes` more transaction bytes (bulk copies) before its phase completes.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Bulk copy (the TMA engine, no tensor map) of `bytes` (a multiple of 16, both ends 16-byte
// aligned) from global memory to this block's shared memory at dst, completing on bar.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// Barrier `id` (1..15) over `threads` threads of the block (a warpgroup's own sync).
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int N>
__device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif

}  // namespace ember::cuda::wg
