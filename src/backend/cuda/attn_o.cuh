#pragma once
// A batch-1 decode step's attention and o projection as one kernel (EMBER_CUDA_ATTN_O; docs/
// CUDA_NOTES.md "Session 59"). One sequence, one new token whose rope and K/V store the q/k/v
// GEMV before already did (its rope epilogue). The grid is clusters of n_kv_heads blocks; block
// r of a cluster computes the attention of K/V head r (its n_heads / n_kv_heads query heads, all
// keys) and writes that slice of the attention output into the shared memory of every block of
// its cluster, so after one cluster barrier each block holds the whole attention row and
// multiplies it by its own 32 (or 64) rows of the packed o weights, which it copied into shared memory
// before its PDL wait; it adds the products into the residual (acc += attn @ w_o^T, no
// reduction across blocks: the order of the sums does not depend on timing). Each cluster
// recomputes the attention (n_kv_heads blocks), so the keys are read once a cluster (from L2),
// and the grid boundary between an attention kernel and the o GEMV, with the o GEMV's weight
// stream, is gone.
//
// Takes: BF16 / F16 K/V without scales, head_dim 128, at most 8 K/V heads and 8 query heads a
// K/V head, int4 or fp8 o weights (qgemv.cuh's packed layout) with k = n_heads * 128, at most
// kAttnOMaxKeys keys. x, the attention output, is rounded to BF16 (int4) / F16 (fp8) for the
// tensor cores, as the staged GEMV rounds it.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/qgemv.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

constexpr int kAttnOMaxKeys = 2048;

struct AttnOArgs {
  // The decode attention's launch (one sequence: seq_ids[0], or sequence 0 when null; its
  // seq_lens, block_tables, max_blocks_per_seq, block_size, heads, head_dim 128, scale, softcap,
  // window; max_kv bounds seq_len; pdl), whose out [n_heads, 128] F32 cluster 0 writes.
  PagedAttnArgs attn;
  QFormat format = QFormat::Int4;
  const void* w = nullptr;  // packed o weights [m, n_heads * 128]
  int64_t m = 0;
  float* acc = nullptr;  // [m] += attn @ w^T
  int threads = 512;     // a block's: 512 or 256 (EMBER_CUDA_ATTN_O_THREADS, A/B runs)
  // o rows a block: 32, or 64 for int4 (EMBER_CUDA_ATTN_O_ROWS): half the clusters, so the
  // attention is recomputed half as often
  int rows = 32;
};

// Whether launch_attn_o takes these arguments (shapes, types, pointers' alignment, shared memory).
bool attn_o_takes(const AttnOArgs& a);
// Whether its grid's clusters are all resident at once on this GPU (the GPCs' sizes bound clusters
// of 8 blocks); an occupancy query, too slow for every launch: the backend caches it per shape.
bool attn_o_one_wave(const AttnOArgs& a);
// The clusters of its grid this GPU runs at once (cudaOccupancyMaxActiveClusters; 0 where the
// query fails), which attn_o_one_wave compares with the grid's.
int attn_o_max_clusters(const AttnOArgs& a);

cudaError_t launch_attn_o(const AttnOArgs& a, cudaStream_t stream);

}  // namespace ember::cuda
