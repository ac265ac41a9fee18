#pragma once
// Device-side helpers shared by the CUDA kernels (included by .cu files only; the launcher
// headers next to them stay plain C++ so host code compiled by g++ can include them).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// FP8 K/V cache elements (OCP e4m3 "fn" and e5m2), stored as plain bytes. Encoding matches
// quant/fp8.h (the CPU backend's cache codec): round to nearest even; e4m3 saturates to
// +-448 (it has no infinity), e5m2 overflows to +-inf like an IEEE format.
struct Fp8E4M3 {
  uint8_t b;
};
struct Fp8E5M2 {
  uint8_t b;
};
template <>
__device__ __forceinline__ float to_float<Fp8E4M3>(Fp8E4M3 v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v.b, __NV_E4M3)));
}
template <>
__device__ __forceinline__ float to_float<Fp8E5M2>(Fp8E5M2 v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v.b, __NV_E5M2)));
}
template <>
__device__ __forceinline__ Fp8E4M3 from_float<Fp8E4M3>(float v) {
  return Fp8E4M3{__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)};
}
template <>
__device__ __forceinline__ Fp8E5M2 from_float<Fp8E5M2>(float v) {
  return Fp8E5M2{__nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E5M2)};
}

// Four fp8 values in one 32-bit word (element 0 in the low byte) -> four halves in two words
// (element 0 in the low half of the first). Exact: every e4m3 / e5m2 value is a half.
template <bool kE4M3>
__device__ __forceinline__ uint2 fp8x4_to_half4(uint32_t w) {
  if constexpr (kE4M3) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3);
    return make_uint2(static_cast<uint32_t>(lo.x) | (static_cast<uint32_t>(lo.y) << 16),
                      static_cast<uint32_t>(hi.x) | (static_cast<uint32_t>(hi.y) << 16));
  } else {
    // An e5m2 byte is the top byte of the half with the same value.
    return make_uint2(__byte_perm(w, 0u, 0x1404), __byte_perm(w, 0u, 0x3424));
  }
}

// Two bf16 packed in one 32-bit word -> two floats (a bf16 is the top half of a float).
__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// Packs two floats into two 16-bit values of T (bf16 or half), lo in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Eight floats as eight BF16 (round to nearest) in one 16-byte chunk, and the sum of such a
// chunk's values (the int4 kernels' per-group x sums).
__device__ __forceinline__ uint4 bf16x8(float4 v0, float4 v1) {
  return make_uint4(pack2<__nv_bfloat16>(v0.x, v0.y), pack2<__nv_bfloat16>(v0.z, v0.w),
                    pack2<__nv_bfloat16>(v1.x, v1.y), pack2<__nv_bfloat16>(v1.z, v1.w));
}
__device__ __forceinline__ float bf16x8_sum(uint4 o) {
  return bf16_lo(o.x) + bf16_hi(o.x) + bf16_lo(o.y) + bf16_hi(o.y) + bf16_lo(o.z) + bf16_hi(o.z) + bf16_lo(o.w) +
         bf16_hi(o.w);
}

// An L2 cache policy for weights: a batch-1 decode step reads each weight once, 3.7 GB (int4)
// to 16 GB (BF16) a step through a 50 MB L2, so with the default policy the stream evicts what
// the step reads again (the K/V cache, the norm weights, the rope tables), whose DRAM latency then
// sits on the critical path of the small kernels. Evict-first lines are replaced before the
// others. (Not volatile: the compiler may create it once a kernel.) Batch-1 decode against the
// default policy in the same call: H200 int4 557 -> 565 tok/s, fp8 398 -> 404, bf16 239.6 -> 241.4;
// H100 int4 486 -> 496, fp8 313 -> 318, int8 320 -> 325 (docs/CUDA_NOTES.md "Session 39").
__device__ __forceinline__ uint64_t l2_weights_policy() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// 16-byte load of weights, streamed once per GEMV: no L1 allocation, evict-first in L2.
__device__ __forceinline__ uint4 load_stream_16(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(l2_weights_policy()));
  return r;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Max of v over the block, every thread gets it (blockDim.x a multiple of 32; scratch: one
// float per warp, reusable once this returns).
__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : -INFINITY;
  r = warp_max(r);
  __syncthreads();
  return r;
}

// Programmatic dependent launch (sm_90+): a kernel launched with the PDL attribute may start
// before its predecessor in the stream has finished; pdl_wait() blocks until that predecessor
// has completed and its writes are visible (a no-op for a kernel launched without the
// attribute). Every kernel the backend launches with pdl = true calls pdl_wait() before it
// touches memory another kernel writes. pdl_launch_dependents() lets the next PDL kernel
// start early.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// pdl_enter's second half (pdl_enter_or_defer below).
__device__ __forceinline__ void pdl_finish_deferred(bool release_early) {
  pdl_wait();
  if (!release_early) pdl_launch_dependents();
}
// pdl_wait() then pdl_launch_dependents(); with release_early the other way round, so the
// next kernel's blocks become resident while this one still waits for its own predecessor.
// Safe for every kernel the backend launches, since none touches memory another kernel writes
// before its pdl_wait(); it pays where the next kernel is a GEMV that streams weights before
// its wait and this one is short and latency-bound (a batch-1 decode step's attention): those
// weights then arrive during this kernel instead of after it. (Not after the norms before a
// BF16 GEMV: measured slower, see cuda_backend_impl.h pdl_early_.)
__device__ __forceinline__ void pdl_enter(bool release_early) {
  if (release_early) pdl_launch_dependents();
  pdl_finish_deferred(release_early);
}
// pdl_enter split in two, for a kernel that first issues loads its predecessor cannot affect
// (defer: only the early release here; pdl_finish_deferred after those loads).
__device__ __forceinline__ void pdl_enter_or_defer(bool defer, bool release_early) {
  if (!defer) pdl_enter(release_early);
  else if (release_early) pdl_launch_dependents();
}

// The gate activation of a GLU: SiLU, or GeLU with the tanh approximation.
__device__ __forceinline__ float glu_act(float g, bool gelu_tanh) {
  if (gelu_tanh) {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g)));
  }
  return g / (1.0f + expf(-g));
}

// Whether this build's sm_90a kernels (wgmma, clusters; EMBER_CUDA_ARCHS) run on `device`: a
// compute capability 9.0 GPU (sm_90a code runs on no other).
inline bool sm90a_kernels_run_on(int device) {
#if defined(EMBER_CUDA_SM90A)
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
#else
  (void)device;
  return false;
#endif
}

// Launches kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent of the
// previous kernel when pdl; returns the launch error.
template <typename... KArgs, typename... Args>
inline cudaError_t launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                 cudaStream_t stream, bool pdl, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace ember::cuda
