#pragma once
// Causal attention over a paged K/V cache on the GPU.
//
// Three kernels share one argument struct:
//  - Decode: tensor-core (mma.sync) kernel for few query rows per sequence. The query heads
//    that share a K/V head are packed as rows of one 16-row tile (GQA head packing: the K/V
//    of a head is read once for its whole group), the 4 warps of a block split each 64-key
//    tile, and the key range of a sequence is split across blocks (Flash-Decoding); a second
//    kernel merges the splits by their log-sum-exp.
//  - Prefill: FlashAttention-2-style tiled kernel, 128 (or 64) packed rows per block, 16 per
//    warp, 64-key tiles streamed through shared-memory stages with cp.async.
//  - PrefillWgmma: the same tiling on Hopper's warpgroup MMAs (sm_90a builds on compute
//    capability 9.0; BF16 / F16 / FP8 K/V, head_dim 64 / 128, and 256 for 16-bit K/V, decode
//    rows included): 64 rows per warpgroup, 128-key tiles, a producer warpgroup streaming them.
//  - Simple: one warp per (token, head), any K/V dtype (INT8 with its per-(slot, head)
//    scales) and head_dim <= 256; the fallback.
// The mma.sync kernels take BF16, F16, FP8_E4M3, FP8_E5M2 or I8 K/V with head_dim 64 or 128.
// One-byte K/V (FP8 with unit scale, the CPU cache's encoding without scales; INT8 with one
// float scale per (slot, head), k_scales / v_scales) is copied to shared memory as bytes.
// Decode has its own kernel that builds the MMA fragments straight from those bytes (fp8 ->
// F16 and int8 -> F16 are exact; head dims and output columns permuted so that one
// shared-memory load serves several fragments; INT8 scales multiply the score and P columns);
// prefill widens each thread's own chunks to F16 (INT8: times its scale) in a second, two-slot
// tile buffer before the block's barrier. Q and P are rounded to F16 for the MMAs.
#include "backend/cuda/hold_gate.cuh"
#include "core/dtype.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ember::cuda {

enum class AttnKernel : int { Auto = 0, Decode = 1, Prefill = 2, Simple = 3, PrefillWgmma = 4 };

// The step's RoPE and K/V-cache store, done by the decode kernel before it reads q or the cache
// (one launch fewer per layer): q and k rotated in place and the new k / v rows stored, with
// launch_rope_kv_store's arithmetic. Only where attention_decode_takes_rope says so.
struct DecodeRopeArgs {
  bool active = false;
  float* k = nullptr;                  // [n_tokens, n_kv_heads, head_dim] F32
  const float* v = nullptr;            // [n_tokens, n_kv_heads, head_dim] F32
  const int32_t* positions = nullptr;  // device [n_tokens]
  const float* inv_freq = nullptr;     // device [head_dim / 2]
  const int32_t* slots = nullptr;      // device [n_tokens], < 0 not stored
  bool neox = true;
  float factor = 1.0f;
};

struct PagedAttnArgs {
  const float* q = nullptr;  // [n_tokens, n_heads, head_dim] F32
  float* out = nullptr;      // [n_tokens, n_heads, head_dim] F32
  const void* k = nullptr;   // [n_blocks, block_size, n_kv_heads, head_dim] kv_type
  const void* v = nullptr;
  DType kv_type = DType::BF16;
  // I8 K/V: one float scale per (slot, kv head), [n_blocks, block_size, n_kv_heads] (KvLayer's
  // k_scales / v_scales); required for I8, unused otherwise.
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  // Device arrays.
  const int32_t* query_start = nullptr;   // [n_seqs + 1]
  const int32_t* seq_lens = nullptr;      // [n_seqs]
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks_per_seq]
  const int32_t* seq_ids = nullptr;       // [n_launch_seqs] the sequences this launch covers
  int n_launch_seqs = 0;
  int max_blocks_per_seq = 0;
  int block_size = 16;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;
  float softcap = 0.0f;
  int window = 0;
  // Host-known maxima over the launched sequences (size the grid).
  int max_new = 0;  // query tokens of one sequence
  int max_kv = 0;   // seq_len
  int splits = 0;   // decode: key-range splits; 0 picks from the GPU's size
  // Tuning knobs (0: the default): K/V tiles in flight per block (decode 2 or 3, prefill 2)
  // and warps per prefill block (4 or 8; 16 query rows each).
  int stages = 0;
  int prefill_warps = 0;
  int prefill_keys = 0;  // PrefillWgmma: keys per tile, 64 or 128
  // PrefillWgmma: 0 block-synced, 1 warp-specialized (2 consumer warpgroups), 2 the same with 3
  // (64-key tiles), 3 warp-specialized with 2 consumers overlapping softmax and P V, 4 the same
  // with 3 (64-key tiles); -1 the default (4).
  int prefill_mode = -1;
  // The device runs the sm_90a kernels (wgmma_prefill_available()): Auto picks PrefillWgmma
  // for prefill where it takes the arguments.
  bool wgmma = false;
  // Launch the tensor-core kernels as programmatic dependents of the previous kernel.
  bool pdl = false;
  // Decode (and its merge): let the next kernel start before this one's wait (pdl_enter).
  bool pdl_release_early = false;
  // Decode: when the launch has fewer blocks than SMs, split the key range finer (down to one
  // 64-key tile per split) to shorten its latency (batch-1 decode).
  bool fill_gpu = false;
  // One-byte K/V decode of at most 8 packed rows a sequence (one token, GQA groups <= 8): the
  // kernel with keys as the MMA rows (half the MMAs of the 16-row one); false keeps the 16-row
  // kernel (A/B runs: EMBER_CUDA_KEYS_AS_M=0).
  bool decode_keys_as_m = true;
  // Decode: RoPE + K/V store first (q, the rope's q, is then rotated in place).
  DecodeRopeArgs rope;
  // Decode without rope: this step's new keys and values were stored, and q rotated, by the
  // kernel just before (the q/k/v GEMV's rope epilogue, GemvRope), so the K/V tiles of earlier
  // tokens are copied before the PDL wait, as with rope (only where rope could be taken:
  // attention_decode_takes_rope).
  bool early_tiles = false;
  // Decode, the 16-bit kernel (attention.cu): each block arrives at the start gate of the held o
  // GEMV after it (hold_gate.cuh) at hold_gate.point.
  HoldGate hold_gate;
};

// K/V cache dtypes the CUDA kv_store and attention take (FP8 without scales; I8 only with its
// per-(slot, head) scales, which the backend checks).
bool cuda_kv_dtype_supported(DType kv_type);
bool attention_mma_supported(DType kv_type, int head_dim);
bool attention_simple_supported(DType kv_type, int head_dim);

// Whether this build has the sm_90a kernels and `device` is compute capability 9.0.
bool wgmma_prefill_available(int device);
bool attention_wgmma_supported(DType kv_type, int head_dim);

// The kernel Auto resolves to for these arguments.
AttnKernel attention_pick(const PagedAttnArgs& a);

// Whether a launch with these arguments can take DecodeRopeArgs: the decode kernel with one
// block per (sequence, kv head) (one split, one row tile: nobody else reads or writes those
// rows) over a BF16 / F16 / FP8 cache.
bool attention_decode_takes_rope(const PagedAttnArgs& a, int num_sms);

// Whether a launch with these arguments opens PagedAttnArgs::hold_gate (its blocks arrive): the
// 16-bit decode kernel where it takes the rope (the one-byte kernels do not arrive).
bool attention_decode_opens_gate(const PagedAttnArgs& a, int num_sms);

// Whether a decode launch with these arguments runs the one-byte kernel with keys as the MMA
// rows (PagedAttnArgs::decode_keys_as_m and what it takes).
bool attention_decode_keys_as_m(const PagedAttnArgs& a);

// Device scratch bytes launch_paged_attention needs (split partials), for that kernel.
size_t attention_workspace_bytes(const PagedAttnArgs& a, AttnKernel kind, int num_sms);

cudaError_t launch_paged_attention(const PagedAttnArgs& a, AttnKernel kind, void* workspace,
                                   size_t workspace_bytes, int num_sms, cudaStream_t stream);

// order[0 .. n) = the sequences 0 .. n - 1 longest first (seq_lens descending, ties by index),
// one block: a decode launch's seq_ids in that order start the longest blocks first, so the
// grid does not end on a tail of long blocks started last (n <= kMaxLongestFirst).
constexpr int kMaxLongestFirst = 8192;
cudaError_t launch_longest_first(const int32_t* seq_lens, int n, int32_t* order, cudaStream_t stream);

// The fallback kernel (attention_simple.cu).
cudaError_t launch_paged_attention_simple(const PagedAttnArgs& a, cudaStream_t stream);

}  // namespace ember::cuda
