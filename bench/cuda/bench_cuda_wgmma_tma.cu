// Two probes of what bounds an FP8 GEMV on Hopper's wgmma and TMA (session 31,
// docs/CUDA_NOTES.md): `bench_cuda_wgmma_tma wgmma` times wgmma.m64nNk32.e4m3 (A and B in shared
// memory, one accumulator chain, waiting for all groups or leaving two in flight) in cycles per
// instruction at N = 8..64 and 1-2 blocks an SM; `bench_cuda_wgmma_tma tma` streams 512 MiB
// through a ring of shared-memory slots filled by one producer lane (2-D tensor boxes of 128
// bytes x R rows with the 128-byte swizzle, or 1-D bulk copies of the same size) while four
// warps only wait for each slot and release it, and prints GB/s beside a device-to-device copy.
// sm_90a only.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

__device__ __forceinline__ uint64_t desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
template <int N>
__global__ void wgmma_kernel(int iters, long long* out, int mode) {
  extern __shared__ __align__(1024) uint8_t sm[];
  for (int i = threadIdx.x; i < 64 * 1024 / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(sm)[i] = 0x38383838u;
  __syncthreads();
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(sm));
  uint64_t da = desc(base), db = desc(base + 32768);
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if constexpr (N == 8) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, 1, 1, 1;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(da + 2 * q), "l"(db + 2 * q));
      } else if constexpr (N == 64) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(da + 2 * q), "l"(db + 2 * q));
      } else if constexpr (N == 16) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, 1, 1, 1;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]) : "l"(da + 2 * q), "l"(db + 2 * q));
      } else if constexpr (N == 32) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, 1, 1, 1;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) : "l"(da + 2 * q), "l"(db + 2 * q));
      }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    if (mode == 0) asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    else asm volatile("wgmma.wait_group.sync.aligned 2;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  long long t1 = clock64();
  float s = 0;
  for (int i = 0; i < N / 2; ++i) s += d[i];
  if (threadIdx.x == 0) out[blockIdx.x] = t1 - t0;
  if (s == 12345.f) out[1000] = 1;
}
template <int N> void run_wgmma(int blocks_per_sm, int mode) {
  long long* o; cudaMalloc(&o, 8192 * 8);
  cudaFuncSetAttribute(wgmma_kernel<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
  int iters = 2000;
  wgmma_kernel<N><<<132 * blocks_per_sm, 128, 65536>>>(iters, o, mode);
  cudaError_t e = cudaDeviceSynchronize();
  long long h; cudaMemcpy(&h, o, 8, cudaMemcpyDeviceToHost);
  printf("N=%3d blocks/SM=%d wait=%d: %.1f cycles per wgmma (%s)\n", N, blocks_per_sm, mode ? 2 : 0, double(h) / (iters * 4), cudaGetErrorString(e));
  cudaFree(o);
}

struct P { CUtensorMap map; const uint8_t* src; int64_t rows, cols; int box_rows, stages, mode, items_per_block; };
__device__ __forceinline__ void mbar_init(uint32_t b, uint32_t c) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(c)); }
__device__ __forceinline__ void mbar_wait(uint32_t b, uint32_t ph) {
  uint32_t d; do { asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0,1,0,p;\n}" : "=r"(d) : "r"(b), "r"(ph) : "memory"); } while (!d);
}
__global__ void __launch_bounds__(160, 1) tma_kernel(const __grid_constant__ P A, long long* out) {
  extern __shared__ uint8_t raw[];
  __shared__ uint64_t full[32], empty[32];
  uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(raw)) + 1023) & ~1023u;
  const int slot = 128 * A.box_rows;
  const int tid = threadIdx.x;
  const int64_t tiles_k = A.cols / 128, tiles_r = A.rows / A.box_rows;
  auto issue = [&](int i) {
    const int s = i % A.stages;
    int64_t item = static_cast<int64_t>(blockIdx.x) * A.items_per_block + i;
    const int64_t kb = item % tiles_k, rt = (item / tiles_k) % tiles_r;
    uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&full[s]));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(slot) : "memory");
    if (A.mode == 0) {
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                   ::"r"(base + s * slot), "l"(reinterpret_cast<uint64_t>(&A.map)), "r"(static_cast<int>(kb * 128)), "r"(static_cast<int>(rt * A.box_rows)), "r"(bar) : "memory");
    } else {
      const uint8_t* src = A.src + (item * slot) % (A.rows * A.cols);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(base + s * slot), "l"(src), "r"(slot), "r"(bar) : "memory");
    }
  };
  if (tid == 128) {
    for (int s = 0; s < A.stages; ++s) { mbar_init(__cvta_generic_to_shared(&full[s]), 1); mbar_init(__cvta_generic_to_shared(&empty[s]), 4); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  long long t0 = clock64();
  if (tid >= 128) {
    if (tid == 128) for (int i = 0; i < A.items_per_block; ++i) {
      if (i >= A.stages) mbar_wait(__cvta_generic_to_shared(&empty[i % A.stages]), ((i / A.stages) - 1) & 1);
      issue(i);
    }
  } else {
    for (int i = 0; i < A.items_per_block; ++i) {
      mbar_wait(__cvta_generic_to_shared(&full[i % A.stages]), (i / A.stages) & 1);
      if (tid % 32 == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(&empty[i % A.stages]))) : "memory");
    }
  }
  __syncthreads();
  if (tid == 0) out[blockIdx.x] = clock64() - t0;
}

void run_tma() {
  void* p = nullptr; cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
  auto enc = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  const int64_t rows = 131072, cols = 4096;  // 512 MiB
  uint8_t* w; cudaMalloc(&w, rows * cols); cudaMemset(w, 0x38, rows * cols);
  long long* o; cudaMalloc(&o, 8192);
  cudaFuncSetAttribute(tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int mode : {0, 1}) for (int br : {64, 128, 256}) for (int st : {8, 16}) {
    P A{}; A.src = w; A.rows = rows; A.cols = cols; A.box_rows = br; A.stages = st; A.mode = mode;
    if (st * 128 * br > 200 * 1024) continue;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}; const cuuint64_t strides[1] = {(cuuint64_t)cols};
    const cuuint32_t box[2] = {128, (cuuint32_t)br}, el[2] = {1, 1};
    enc(&A.map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w, dims, strides, box, el, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    const int64_t total_items = rows * cols / (128 * br);
    A.items_per_block = static_cast<int>(total_items / 132);
    size_t smem = 1024 + st * 128 * br;
    for (int rep = 0; rep < 3; ++rep) {
      cudaEventRecord(e0);
      tma_kernel<<<132, 160, smem>>>(A, o);
      cudaEventRecord(e1); cudaError_t er = cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      if (rep == 2) printf("%s box 128Bx%d stages %d: %.0f GB/s (%s)\n", mode ? "bulk1d" : "tma2d", br, st,
                           double(A.items_per_block) * 132 * 128 * br / (ms * 1e-3) / 1e9, cudaGetErrorString(er));
    }
  }
  // copy bandwidth reference
  uint8_t* w2; cudaMalloc(&w2, rows * cols);
  cudaEventRecord(e0); cudaMemcpy(w2, w, rows * cols, cudaMemcpyDeviceToDevice); cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms; cudaEventElapsedTime(&ms, e0, e1); printf("d2d copy: %.0f GB/s\n", 2.0 * rows * cols / (ms * 1e-3) / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "tma") != 0)
    for (int m : {0, 1})
      for (int b : {1, 2}) {
        run_wgmma<8>(b, m);
        run_wgmma<16>(b, m);
        run_wgmma<32>(b, m);
        run_wgmma<64>(b, m);
      }
  if (std::strcmp(mode, "wgmma") != 0) run_tma();
  return 0;
}
