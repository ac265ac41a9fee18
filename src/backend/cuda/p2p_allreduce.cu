#include "backend/cuda/p2p_allreduce.cuh"

namespace ember::cuda {

namespace {

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

constexpr int kThreads = kP2pChunk / 4;  // one float4 a thread

// vec: in and out are 16-byte aligned (float4 access), else element by element.
__global__ void __launch_bounds__(kThreads) p2p_all_reduce_kernel(P2pRank p, const float* in, float* out, int64_t n,
                                                                   bool vec) {
  __shared__ uint32_t epoch_s;
  const int b = blockIdx.x;
  if (threadIdx.x == 0) epoch_s = p.epochs[b] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_s;
  const int64_t base = static_cast<int64_t>(b) * kP2pChunk, i = base + 4 * static_cast<int64_t>(threadIdx.x);
  const size_t set = static_cast<size_t>(epoch & 1) * p.n_ranks * kP2pMaxElems;
  const bool whole = vec && i + 4 <= n;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (whole) {
    v = *reinterpret_cast<const float4*>(in + i);
  } else if (i < n) {
    float t[4] = {0.f, 0.f, 0.f, 0.f};
    for (int j = 0; j < 4 && i + j < n; ++j) t[j] = in[i + j];
    v = make_float4(t[0], t[1], t[2], t[3]);
  }
  if (i < n)
    for (int r = 0; r < p.n_ranks; ++r)
      *reinterpret_cast<float4*>(p.slots[r] + set + static_cast<size_t>(p.rank) * kP2pMaxElems + i) = v;
  __syncthreads();
  if (threadIdx.x < p.n_ranks) {  // thread r signals rank r, then waits for rank r's signal
    __threadfence_system();
    store_release_sys(p.flags[threadIdx.x] + static_cast<size_t>(b) * p.n_ranks + p.rank, epoch);
    const uint32_t* mine = p.flags[p.rank] + static_cast<size_t>(b) * p.n_ranks + threadIdx.x;
    while (static_cast<int32_t>(load_acquire_sys(mine) - epoch) < 0) {
    }
  }
  __syncthreads();
  if (i < n) {
    const float* slots = p.slots[p.rank] + set;
    float4 s = __ldcg(reinterpret_cast<const float4*>(slots + i));
    for (int r = 1; r < p.n_ranks; ++r) {
      const float4 t = __ldcg(reinterpret_cast<const float4*>(slots + static_cast<size_t>(r) * kP2pMaxElems + i));
      s.x += t.x, s.y += t.y, s.z += t.z, s.w += t.w;
    }
    if (whole) {
      *reinterpret_cast<float4*>(out + i) = s;
    } else {
      const float t[4] = {s.x, s.y, s.z, s.w};
      for (int j = 0; j < 4 && i + j < n; ++j) out[i + j] = t[j];
    }
  }
  if (threadIdx.x == 0) p.epochs[b] = epoch;
}

}  // namespace

cudaError_t launch_p2p_all_reduce(const P2pRank& p, const float* in, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n > kP2pMaxElems || p.n_ranks < 2 || p.n_ranks > kP2pMaxRanks) return cudaErrorInvalidValue;
  const auto blocks = static_cast<unsigned>((n + kP2pChunk - 1) / kP2pChunk);
  const bool vec = ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
  p2p_all_reduce_kernel<<<blocks, kThreads, 0, stream>>>(p, in, out, n, vec);
  return cudaGetLastError();
}

}  // namespace ember::cuda
