#pragma once
// A batch-1 decode step's attention and o projection as one kernel, the keys split rather than
// the attention recomputed (EMBER_CUDA_ATTN_O=2; docs/CUDA_NOTES.md "Session 60"). attn_o.cuh's
// kernel recomputes the whole attention in every cluster (16 times at Llama-3-8B); here each K/V
// head r has its own cluster(s) of 8 blocks:
//
//   - before its PDL wait, block j of head r's cluster copies the o weights it multiplies into
//     shared memory: rows chunk j (of the cluster's part of the rows) by the columns of head r's
//     query heads (group x 128);
//   - after it, block j computes head r's attention over its eighth of the keys (a flash-decoding
//     partial: max, sum, unnormalized output), the cluster's blocks read each other's partials
//     through distributed shared memory and merge them, so every block holds head r's attention
//     output;
//   - each block multiplies that slice by its rows (tensor cores) and stores the product in
//     part[r][rows]; the last of the n_kv_heads blocks of a rows chunk to finish (a counter)
//     adds part[0 .. n_kv_heads)[rows] into acc in head order, so the sum does not depend on timing.
//
// The keys are read once a cluster (parts clusters a head, 1 or 2 at Llama-3-8B: where one
// cluster's rows do not fit in shared memory the rows go to `parts` clusters, each recomputing
// head r's attention). Takes: BF16 / F16 K/V without scales, head_dim 128, at most 8 query heads a
// K/V head, int4 or fp8 o weights with k = n_heads * 128, at most kAttnOMaxKeys keys.
#include "backend/cuda/attn_o.cuh"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ember::cuda {

constexpr int kAttnOSplitMaxChunks = 64;  // rows chunks (counters): parts x 8

struct AttnOSplitArgs {
  PagedAttnArgs attn;  // as AttnOArgs::attn; the head 0 cluster's block 0 writes attn.out (F32)
  QFormat format = QFormat::Int4;
  const void* w = nullptr;  // packed o weights [m, n_heads * 128]
  int64_t m = 0;
  float* acc = nullptr;          // [m] += attn @ w^T
  float* part = nullptr;         // [n_kv_heads, m] scratch: each head's product
  uint32_t* counters = nullptr;  // [kAttnOSplitMaxChunks], zero before the first launch; every launch leaves them zero
};

// Whether launch_attn_o_split takes these arguments (shapes, types, alignment, shared memory).
bool attn_o_split_takes(const AttnOSplitArgs& a);
// Clusters a K/V head (each with its share of the o rows); 0 where none fits in shared memory.
int attn_o_split_parts(const AttnOSplitArgs& a);
// Bytes of `part` it needs.
size_t attn_o_split_part_bytes(const AttnOSplitArgs& a);

cudaError_t launch_attn_o_split(const AttnOSplitArgs& a, cudaStream_t stream);

}  // namespace ember::cuda
