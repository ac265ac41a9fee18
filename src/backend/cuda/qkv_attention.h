#pragma once
// The decode attention of a batch-1 step inside the q/k/v GEMV that does the rope and the K/V
// store (GemvRope, rope_epilogue.h): the GEMV's blocks of one KV head's group (its G q heads'
// tiles, its k and v tiles) each take a ticket when their tile is stored, and the block that takes
// the last one computes that group's attention over the sequence's keys (the step's own K/V row
// included, which the group's k and v tiles have just stored in the cache) and writes its G rows of
// the attention output. So the attention kernel's launch, its wait for the whole q/k/v grid and
// the o GEMV's wait for it leave a decode layer (docs/CUDA_NOTES.md "Session 45").
//
// Taken only where it is cheap and the plain kernel would compute the same function: one
// sequence, one new token, a BF16 / F16 cache without scales, no sliding window or soft-capping,
// G <= kGemvAttnMaxGroup, head_dim <= kGemvAttnMaxHeadDim, and a bounded number of keys (the
// decode attention kernel splits long contexts over many blocks; one block a group does not).
#include <cstdint>

namespace ember::cuda {

inline constexpr int kGemvAttnMaxGroup = 4;
inline constexpr int kGemvAttnMaxHeadDim = 128;
inline constexpr int kGemvAttnMaxTableBlocks = 1024;  // block-table entries a group's block caches
inline constexpr int kGemvAttnMaxKvHeads = 256;       // tickets the backend keeps

struct GemvAttn {
  const int32_t* seq_len = nullptr;      // device [1]: keys of the sequence, this step's included
  const int32_t* block_table = nullptr;  // device: the sequence's block ids
  float* out = nullptr;                  // device [n_heads * head_dim] F32: the attention output
  int* tickets = nullptr;                // device [n_kv_heads]; zero before and after each launch
  float scale_log2 = 0.0f;               // softmax scale * log2(e)
  int block_size = 0;
  int group = 0;                         // q heads a kv head (1..kGemvAttnMaxGroup)
  int max_keys = 0;                      // the most keys seq_len may hold (host's bound)
};

}  // namespace ember::cuda
