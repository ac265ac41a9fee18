#pragma once
// Device half of the rope + K/V store epilogue (rope_epilogue.h), shared by the packed GEMV
// (qgemv_staged.cu) and the BF16 GEMV (gemv.cu): the angle of a neox pair with
// launch_rope_kv_store's arithmetic (same sincosf and factor) and the store of one value into a
// BF16 / F16 cache.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/rope_epilogue.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ember::cuda {

// cos and sin of the angle pos * freq, times r.factor: a rotated pair (lo, hi) becomes
// (lo * cs - hi * sn, lo * sn + hi * cs).
__device__ __forceinline__ void rope_cos_sin(const GemvRope& r, float pos, float freq, float& cs, float& sn) {
  sincosf(pos * freq, &sn, &cs);
  cs = cs * r.factor;
  sn = sn * r.factor;
}

// Element i of the k (kv 1) or v (kv 2) cache.
__device__ __forceinline__ void rope_cache_store(const GemvRope& r, int kv, size_t i, float v) {
  void* cache = kv == 1 ? r.k_cache : r.v_cache;
  if (r.cache_bf16) static_cast<__nv_bfloat16*>(cache)[i] = from_float<__nv_bfloat16>(v);
  else static_cast<__half*>(cache)[i] = from_float<__half>(v);
}

}  // namespace ember::cuda
