// BF16-weight GEMV. One warp owns R output rows; each lane streams 16-byte chunks (8 bf16)
// of those rows with U chunks per row in flight before the first use, so a warp keeps
// R * U * 512 bytes of weight loads outstanding; x (F32, at most 4 * k * 4 bytes) is read
// through L1, where every warp of the SM finds it. The grid has one task per warp (no
// persistent loop): tasks are short, so the block scheduler balances the tail. With
// programmatic dependent launch the next kernel's blocks start (and stream their first
// weights) while this one drains, which hides most of the per-kernel ramp of a decode step.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gemv.cuh"

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

template <int N, int R, int U, bool kSmemX>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_bf16_kernel(const uint16_t* __restrict__ w, const float* __restrict__ x,
                     const float* __restrict__ bias, float* __restrict__ out, int64_t m,
                     int64_t k) {
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (blockIdx.x * int64_t{kWarps} + threadIdx.x / 32) * R;
  if (!kSmemX && row0 >= m) return;  // (with x in shared memory every warp reaches the barrier)
  const int64_t k8 = k / 8;  // 16-byte chunks per row
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    // Rows past m (last warp only) re-read row m - 1 and are never stored.
    const int64_t row = row0 + r < m ? row0 + r : m - 1;
    wr[r] = reinterpret_cast<const uint4*>(w + row * k);
  }
  float acc[R][N];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < N; ++j) acc[r][j] = 0.0f;

  // The first loads touch only weights, so under programmatic dependent launch they are
  // issued while the previous kernel (the producer of x) drains; x is read after the wait.
  uint4 wv[R][U];
  auto load = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = base + u * 32;
#pragma unroll
      for (int r = 0; r < R; ++r)
        wv[r][u] = idx < k8 ? load_stream_16(wr[r] + idx) : make_uint4(0, 0, 0, 0);
    }
  };
  load(lane);
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // no-op without a dependency
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  extern __shared__ float4 s_x[];  // [N * k / 4] when kSmemX
  if constexpr (kSmemX) {
    const float4* xg = reinterpret_cast<const float4*>(x);
    for (int64_t i = threadIdx.x; i < N * k / 4; i += blockDim.x) s_x[i] = xg[i];
    __syncthreads();
  }
  for (int64_t base = lane; base < k8; base += 32 * U) {
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
          for (int r = 0; r < R; ++r) acc[r][j] += dot8(wv[r][u], x0, x1);
        }
      }
    }
    if (base + 32 * U < k8) load(base + 32 * U);
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float v = warp_sum(acc[r][j]);
      if (lane == 0 && row0 + r < m) out[j * m + row0 + r] = v + (bias ? bias[row0 + r] : 0.0f);
    }
}

template <int N, int R, int U, bool kSmemX>
cudaError_t launch(const void* w, const float* x, const float* bias, float* out, int64_t m,
                   int64_t k, bool pdl, cudaStream_t stream) {
  const int64_t tasks = (m + R - 1) / R;
  const size_t smem = kSmemX ? static_cast<size_t>(N * k) * sizeof(float) : 0;
  if (kSmemX) {
    if (static_cast<int64_t>(smem) > kGemvMaxSmemX) return cudaErrorInvalidValue;
    const cudaError_t e = cudaFuncSetAttribute(gemv_bf16_kernel<N, R, U, kSmemX>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((tasks + kWarps - 1) / kWarps));
  cfg.blockDim = dim3(kWarps * 32);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, gemv_bf16_kernel<N, R, U, kSmemX>,
                                           static_cast<const uint16_t*>(w), x, bias, out, m, k);
  return e != cudaSuccess ? e : cudaGetLastError();
}

template <int N>
cudaError_t launch_n(int variant, const void* w, const float* x, const float* bias, float* out,
                     int64_t m, int64_t k, bool pdl, cudaStream_t stream) {
  static_assert(kGemvVariants[0].rows_per_warp == 1 && kGemvVariants[0].unroll == 8);
  static_assert(kGemvVariants[1].rows_per_warp == 2 && kGemvVariants[1].unroll == 4);
  static_assert(kGemvVariants[2].rows_per_warp == 4 && kGemvVariants[2].unroll == 4);
  static_assert(kGemvVariants[3].rows_per_warp == 2 && kGemvVariants[3].unroll == 8);
  static_assert(kGemvVariants[4].rows_per_warp == 1 && kGemvVariants[4].unroll == 8);
  static_assert(kGemvVariants[5].rows_per_warp == 2 && kGemvVariants[5].unroll == 4);
  switch (variant) {
    case 0: return launch<N, 1, 8, false>(w, x, bias, out, m, k, pdl, stream);
    case 1: return launch<N, 2, 4, false>(w, x, bias, out, m, k, pdl, stream);
    case 2: return launch<N, 4, 4, false>(w, x, bias, out, m, k, pdl, stream);
    case 3: return launch<N, 2, 8, false>(w, x, bias, out, m, k, pdl, stream);
    case 4: return launch<N, 1, 8, true>(w, x, bias, out, m, k, pdl, stream);
    case 5: return launch<N, 2, 4, true>(w, x, bias, out, m, k, pdl, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool gemv_supported(int n, int64_t k, const void* x, const void* w) {
  return n >= 1 && n <= kGemvMaxBatch && k % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

cudaError_t launch_gemv_bf16(const void* w, const float* x, const float* bias, float* out, int n,
                             int64_t m, int64_t k, int variant, bool pdl, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  switch (n) {
    case 1: return launch_n<1>(variant, w, x, bias, out, m, k, pdl, stream);
    case 2: return launch_n<2>(variant, w, x, bias, out, m, k, pdl, stream);
    case 3: return launch_n<3>(variant, w, x, bias, out, m, k, pdl, stream);
    case 4: return launch_n<4>(variant, w, x, bias, out, m, k, pdl, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ember::cuda
