#pragma once
// Reading and writing rows of the paged K/V cache in its storage dtype. Internal to the CPU
// backend. Cache rows are [n_kv_heads, head_dim] per slot; INT8 (and optionally FP8) rows
// carry one float scale per (slot, kv head).
#include "backend/backend.h"

#include <cstdint>

namespace ember::cpu {

bool kv_dtype_supported(DType t);
struct KernelTable;
// Writes head vector src[head_dim] into slot `slot`, kv head `h` of cache tensor `cache`.
void kv_write_head(const KernelTable& kt, const Tensor& cache, float* scales, int64_t slot, int n_kv_heads, int h, int head_dim,
                   const float* src);
// Reads it back as floats into dst[head_dim].
void kv_read_head(const KernelTable& kt, const Tensor& cache, const float* scales, int64_t slot, int n_kv_heads,
                  int h, int head_dim, float* dst);

}  // namespace ember::cpu
