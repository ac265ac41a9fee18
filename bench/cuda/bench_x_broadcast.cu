// Does reading one hot activation vector from every block cost a batch-1 GEMV its x staging?
//
// Every block of a decode GEMV reads the whole of x (the previous kernel's output: 16 KB at k
// 4096, 57 KB at k 14336) right after its PDL wait, so 256-400 blocks ask the same ~128-450 L2
// lines at once. Session 27's probe timed that staging at ~2,800 cycles even where the block's
// weights had long landed (the o GEMV), several L2 latencies. If the lines' L2 slices serialize
// the requests, the producer writing C copies of x (block b reading copy b % C) spreads them over
// C times as many slices and the staging shortens; if not, the time does not move with C.
//
// A CUDA graph of 200 pairs (graph_timing.h, the median of 5 replays): a writer (C copies of x, as the producer would) and a reader as the
// GEMV's dependent launch (PDL): G blocks of 256 threads, each optionally copying W KiB of
// "weights" into shared memory with cp.async before its wait (the ring's pre-wait fill), then
// reading all of its copy of x, four 16-byte loads a thread in flight. Prints the time a pair,
// RESULT|x_broadcast|k=..|blocks=..|weights_kib=..|copies_written=C|copies_read=R|us_per_pair=..:
// R = C against R = 1 at the same C (the writer's extra stores the same) is the answer. Not a
// unit test: a question for a GPU session.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "graph_timing.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

__global__ void write_x(float* x, int k, int copies) {
  ember::cuda::pdl_wait();
  ember::cuda::pdl_launch_dependents();
  const int n = k * copies;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = static_cast<float>(i % k) * 1e-3f;
}

__global__ void read_x(const float* x, int k, int copies, const uint4* w, int w_chunks, float* out) {
  extern __shared__ uint4 ring[];  // [w_chunks]
  for (int j = threadIdx.x; j < w_chunks; j += blockDim.x) {
    const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(ring + j));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
                 "l"(w + static_cast<int64_t>(blockIdx.x) * w_chunks + j)
                 : "memory");
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  ember::cuda::pdl_wait();
  ember::cuda::pdl_launch_dependents();
  const float4* xc = reinterpret_cast<const float4*>(x + static_cast<int64_t>(blockIdx.x % copies) * k);
  const int n4 = k / 4;
  float acc = 0.0f;
  for (int i = threadIdx.x; i < n4; i += 4 * blockDim.x) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int idx = i + u * blockDim.x;
      v[u] = idx < n4 ? __ldg(xc + idx) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  if (w_chunks > 0) acc += static_cast<float>(reinterpret_cast<const uint32_t*>(ring)[threadIdx.x % (w_chunks * 4)] & 1u);
  acc = ember::cuda::warp_sum(acc);
  if (threadIdx.x % 32 == 0) atomicAdd(out + blockIdx.x, acc);
}

}  // namespace

int main() {
  int sms = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, sms);
  const int kMaxK = 14336, kMaxCopies = 8, kMaxBlocks = 4 * sms, kMaxWKiB = 64;
  float *x = nullptr, *out = nullptr;
  uint4* w = nullptr;
  EMBER_CUDA_CHECK(cudaMalloc(&x, sizeof(float) * kMaxK * kMaxCopies));
  EMBER_CUDA_CHECK(cudaMalloc(&out, sizeof(float) * kMaxBlocks));
  EMBER_CUDA_CHECK(cudaMalloc(&w, size_t{kMaxWKiB} * 1024 * kMaxBlocks));
  EMBER_CUDA_CHECK(cudaMemset(w, 0, size_t{kMaxWKiB} * 1024 * kMaxBlocks));
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(read_x, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxWKiB * 1024));
  cudaStream_t stream;
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int kPairs = 200;
  for (int k : {4096, 14336}) {
    for (int blocks : {2 * sms, 3 * sms}) {
      for (int w_kib : {0, 32}) {
        for (int copies : {1, 2, 4, 8}) {
         for (int spread : {0, 1}) {  // 0: the reader reads copy 0 only (the writer's extra stores alone)
          if (copies == 1 && spread == 1) continue;
          const int read_copies = spread ? copies : 1;
          const int w_chunks = w_kib * 1024 / 16;
          const double ms = ember::cuda::bench::graph_median_ms(stream, kPairs, 5, 1, [&](int) {
            return ember::cuda::launch_kernel(write_x, dim3(sms), dim3(256), 0, stream, true, x, k, copies) ==
                       cudaSuccess &&
                   ember::cuda::launch_kernel(read_x, dim3(blocks), dim3(256), size_t(w_kib) * 1024, stream, true,
                                              static_cast<const float*>(x), k, read_copies,
                                              static_cast<const uint4*>(w), w_chunks, out) == cudaSuccess;
          });
          std::printf("RESULT|x_broadcast|k=%d|blocks=%d|weights_kib=%d|copies_written=%d|copies_read=%d|us_per_pair=%.3f\n",
                      k, blocks, w_kib, copies, read_copies, ms * 1000.0);
         }
        }
      }
    }
  }
  return 0;
}
