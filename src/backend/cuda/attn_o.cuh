#pragma once
// A batch-1 decode step's attention and o projection as one kernel (EMBER_CUDA_ATTN_O; docs/
// CUDA_NOTES.md "Session 59"). One sequence, one new token whose rope and K/V store the q/k/v
// GEMV before already did (its rope epilogue). The grid is clusters of n_kv_heads blocks; block
// r of a cluster computes the attention of K/V head r (its n_heads / n_kv_heads query heads, all
// keys) and writes that slice of the attention output into the shared memory of every block of
// its cluster, so after one cluster barrier each block holds the whole attention row and
// multiplies it by its own 32 rows of the packed o weights, which it copied into shared memory
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
#include "backend/cuda/qgemv.cuh"
#include "core/dtype.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

constexpr int kAttnOMaxKeys = 2048;
constexpr int kAttnORows = 32;  // o rows a block

struct AttnOArgs {
  const float* q = nullptr;   // [n_heads, 128] F32, rotated
  float* attn_out = nullptr;  // [n_heads, 128] F32: the attention row, written by cluster 0
  const void* k = nullptr;    // [n_blocks, block_size, n_kv_heads, 128] kv_type
  const void* v = nullptr;
  DType kv_type = DType::BF16;
  const int32_t* seq_lens = nullptr;      // device [n_seqs]
  const int32_t* block_tables = nullptr;  // device [n_seqs, max_blocks_per_seq]
  const int32_t* seq_ids = nullptr;       // device [1] the sequence (null: sequence 0)
  int max_blocks_per_seq = 0;
  int block_size = 16;
  int n_heads = 0;
  int n_kv_heads = 0;
  float scale = 1.0f;
  float softcap = 0.0f;
  int window = 0;
  int max_kv = 0;  // host bound on seq_len (sizes the score buffer)
  QFormat format = QFormat::Int4;
  const void* w = nullptr;  // packed o weights [m, n_heads * 128]
  int64_t m = 0;
  float* acc = nullptr;  // [m] += attn @ w^T
  bool pdl = true;
};

// Whether launch_attn_o takes these arguments (shapes and types above; alignment of the
// pointers; the cluster grid fits the GPU in one wave).
bool attn_o_takes(const AttnOArgs& a);

cudaError_t launch_attn_o(const AttnOArgs& a, cudaStream_t stream);

}  // namespace ember::cuda
