#pragma once
// Row gather (embedding lookup, logit rows) and row scatter (K/V into cache slots).
#include "core/dtype.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

// out[i, :] = table[ids[i], :].   table [n_rows, d] F32/F16/BF16, ids [n] device, out [n, d] F32.
cudaError_t launch_get_rows(const void* table, DType table_type, const int32_t* ids, int n,
                            int64_t d, float* out, cudaStream_t stream, bool pdl = false);

// cache[slots[i]] = src[i] for one of K or V.   src [n, row] F32; cache [n_slots, row] of
// cache_type (F32/F16/BF16, or FP8_E4M3/FP8_E5M2 with unit scale: the CPU cache's
// encoding when it has no scales), row = n_kv_heads * head_dim; slots [n] device, < 0 skipped.
cudaError_t launch_kv_store(const float* src, const int32_t* slots, int n, int64_t row,
                            void* cache, DType cache_type, cudaStream_t stream);
// K and V of one step in one launch (v / v_cache may be null: K only).   pdl: launch as a
// programmatic dependent of the previous kernel.
cudaError_t launch_kv_store2(const float* k, const float* v, const int32_t* slots, int n,
                             int64_t row, void* k_cache, void* v_cache, DType cache_type,
                             cudaStream_t stream, bool pdl = false);
// The same for an INT8 cache (launch_kv_store2 refuses I8): each (slot, head) row of
// head_dim values is stored as int8 with one float scale, scales [n_slots, n_kv_heads], by
// the CPU cache's rule (backend/cpu/kv_store.cpp kv_write_head: scale = max|x| / 127,
// q = round-half-away(x * (1 / scale)), 0 for an all-zero row), so both caches hold the same
// bytes and scales. v / v_cache / v_scales may be null (K only).
cudaError_t launch_kv_store2_i8(const float* k, const float* v, const int32_t* slots, int n,
                                int n_kv_heads, int head_dim, int8_t* k_cache, int8_t* v_cache,
                                float* k_scales, float* v_scales, cudaStream_t stream, bool pdl = false);

// RoPE of one step's q and k (rotary_dim == head_dim) and the K/V cache store in one launch:
// q [n, hq, head_dim] and k [n, hk, head_dim] are rotated in place; the rotated k and
// v [n, hk, head_dim] go to the caches at slots (device, < 0 skipped).
struct RopeKvStoreArgs {
  float* q = nullptr;
  int hq = 0;
  float* k = nullptr;
  const float* v = nullptr;
  int hk = 0;
  const int32_t* positions = nullptr;  // device [n]
  const float* inv_freq = nullptr;     // device [head_dim / 2]
  const int32_t* slots = nullptr;      // device [n]
  int64_t n = 0;
  int head_dim = 0;
  bool neox = true;
  float factor = 1.0f;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  DType cache_type = DType::BF16;
  // I8 caches: the per-(slot, head) scales [n_slots, hk] (launch_kv_store2_i8's rule);
  // required for I8, unused otherwise.
  float* k_scales = nullptr;
  float* v_scales = nullptr;
};
cudaError_t launch_rope_kv_store(const RopeKvStoreArgs& a, cudaStream_t stream, bool pdl = false);

}  // namespace ember::cuda
