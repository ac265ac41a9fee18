// What bandwidth the staged packed GEMV's way of reading weights can reach, with no arithmetic:
// 8 warps a block, each with a ring of R lane-private 1 KiB units (32 lanes x 2 x 16 bytes, one
// cp.async.cg each, one commit group a unit), waiting for its oldest unit, then "computing" it
// for D cycles (a clock64 spin: the latency of the GEMV's dequantize + mma chain, not its issue
// slots) before copying the next unit into that slot. Streams 512 MiB (so L2 holds none of it)
// and prints GB/s beside a device-to-device copy, for blocks an SM x R x D.
//
//   bench_cp_async_ring [blocks_per_sm...]
//
// If the ring alone reaches the copy bandwidth at the GEMV's geometry (2 blocks x 8 warps x 8
// units) with D = 0 but not at the D that the kernel's unit takes, the kernel's per-unit latency,
// not the memory system, is what bounds it (docs/CUDA_NOTES.md, session 50).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kWarps = 8;
constexpr int kUnit = 1024;

__device__ __forceinline__ void cp16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// units: total 1 KiB units; block b's warps take units (b * kWarps + w) + i * (gridDim.x * kWarps).
template <int R>
__global__ void __launch_bounds__(kWarps * 32) ring_kernel(const uint8_t* w, int64_t units, int delay,
                                                           unsigned* sink) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + warp * R * kUnit + lane * 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t u = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  auto issue = [&](int slot, int64_t unit) {
    if (unit < units) {
      const uint8_t* src = w + unit * kUnit + lane * 16;
      cp16(ring + slot * kUnit, src);
      cp16(ring + slot * kUnit + 16, src + 512);
    }
    commit();
  };
#pragma unroll
  for (int p = 0; p < R; ++p) issue(p, u + p * stride);
  unsigned acc = 0;
  for (int64_t i = 0; u + i * stride < units; i += R) {
#pragma unroll
    for (int p = 0; p < R; ++p) {
      wait_groups<R - 1>();
      const uint32_t* v = reinterpret_cast<const uint32_t*>(smem + warp * R * kUnit + p * kUnit + lane * 32);
      acc += v[0] ^ v[5];
      if (delay > 0) {
        const long long t0 = clock64();
        while (clock64() - t0 < delay) {
        }
      }
      issue(p, u + (i + R + p) * stride);
    }
  }
  wait_groups<0>();
  if (acc == 0x12345678u) *sink = acc;
}

// The best of three runs of launch(), in ms (negative on a launch error).
template <typename F>
float best_ms(F launch) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best = 1e30f;
  for (int rep = 0; rep < 3; ++rep) {
    cudaEventRecord(e0);
    launch();
    cudaEventRecord(e1);
    if (cudaEventSynchronize(e1) != cudaSuccess) return -1.0f;
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (ms < best) best = ms;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best;
}

template <int R>
double run(const uint8_t* w, int64_t units, int blocks, int delay, unsigned* sink) {
  const int smem = kWarps * R * kUnit;
  cudaFuncSetAttribute(ring_kernel<R>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const float ms = best_ms([&] { ring_kernel<R><<<blocks, kWarps * 32, smem>>>(w, units, delay, sink); });
  return ms < 0 ? -1.0 : static_cast<double>(units) * kUnit / (ms * 1e-3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int64_t bytes = int64_t{512} << 20;
  uint8_t* w = nullptr;
  uint8_t* w2 = nullptr;
  unsigned* sink = nullptr;
  if (cudaMalloc(&w, bytes) != cudaSuccess || cudaMalloc(&w2, bytes) != cudaSuccess ||
      cudaMalloc(&sink, 4) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  cudaMemset(w, 0x5a, bytes);
  const float copy_ms = best_ms([&] { cudaMemcpy(w2, w, bytes, cudaMemcpyDeviceToDevice); });
  std::printf("d2d copy: %.0f GB/s (read + write)\n", 2.0 * bytes / (copy_ms * 1e-3) / 1e9);
  std::vector<int> bps;
  for (int a = 1; a < argc; ++a) bps.push_back(std::atoi(argv[a]));
  if (bps.empty()) bps = {1, 2, 3};
  const int64_t units = bytes / kUnit;
  for (int b : bps)
    for (int delay : {0, 250, 500, 1000, 2000}) {
      std::printf("blocks/SM %d, unit latency %4d cycles: R=2 %5.0f  R=4 %5.0f  R=8 %5.0f  R=12 %5.0f GB/s\n", b, delay,
                  run<2>(w, units, b * sms, delay, sink), run<4>(w, units, b * sms, delay, sink),
                  b <= 3 ? run<8>(w, units, b * sms, delay, sink) : -1.0,
                  b <= 2 ? run<12>(w, units, b * sms, delay, sink) : -1.0);
    }
  return 0;
}
