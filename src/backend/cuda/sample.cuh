#pragma once
// Sampling on the GPU: greedy (argmax) and sampled rows (the host Sampler's rules, bias and
// penalties included), so that a step downloads one token id per row instead of the whole
// vocabulary; and the pipelined steps' fed input ids.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace ember::cuda {

// out[r] = the index of the largest value of row r of x [n_rows, vocab] F32 (row-major):
// NaN never wins, the lowest index wins among equal values, -inf is never picked; a row with
// no value above -inf gives 0. The host sampler's greedy pick on the same row is the same
// (sample/sampler.cpp: NaN -> -inf, first maximum, fallback token 0).
// scratch: argmax_scratch_bytes() bytes whose counters start zeroed (cudaMemset once; every
// launch leaves them zeroed), for rows split over several blocks (at most 64 rows); nullptr
// keeps one block a row. Launches sharing a scratch must not run concurrently.
size_t argmax_scratch_bytes();
// tokens[i] = ids[feed[i]] where feed[i] >= 0, for i < n: a pipelined step's input tokens from
// the picks of the step queued before it (ids: launch_argmax_rows's out), on the stream.
cudaError_t launch_feed_tokens(int32_t* tokens, const int32_t* feed, const int32_t* ids, int n, cudaStream_t stream);
// host_out (null: none): pinned host memory the device can address (cudaHostAlloc'd under unified
// addressing) that also receives out's ids, so that a pipelined step's picks need no copy after
// the kernel: each copy on the stream held the next step back by several microseconds.
cudaError_t launch_argmax_rows(const float* x, int n_rows, int64_t vocab, int32_t* out, int32_t* host_out,
                               void* scratch, cudaStream_t stream);

// One token's adjustment (sample/token_adjust.h, the host Sampler's min_tokens suppression,
// logit_bias and penalties): x -> -inf (kSampleAdjSuppress), x += bias (kSampleAdjBias),
// x = x > 0 ? x / repetition : x * repetition (kSampleAdjRepeat), x -= subtract
// (kSampleAdjSubtract), in that order, each one float operation rounded to nearest.
constexpr uint32_t kSampleAdjSuppress = 1u, kSampleAdjBias = 2u, kSampleAdjRepeat = 4u, kSampleAdjSubtract = 8u;
struct alignas(16) DeviceSampleAdj {
  int32_t token = 0;
  uint32_t flags = 0;
  float bias = 0.0f;
  float subtract = 0.0f;
};

// One row of a sampled step, as the host Sampler defines it (sample/sampler.cpp,
// logits_processors.cpp): x = logits with NaN -> -inf, then the row's adjustments
// adj[adj_begin .. adj_begin + n_adj) (token ids strictly ascending, in [0, vocab)); greedy:
// the first maximum of x (none above -inf: the argmax rule above on the raw row); otherwise x *= inv_temperature,
// min_p keeps x >= max + log_min_p, top_k keeps x >= the k-th largest (ties kept), top_p keeps
// the shortest prefix of the (x descending, id ascending) order whose mass reaches top_p, and
// the token is the first id (ascending) whose cumulative kept mass exceeds u * (kept mass).
// Masses are exp(x - max) in fixed point (2^-44 units of the largest, integer sums: the same
// bits every run); a token below 2^-44 of the largest is never drawn. A row whose x has no
// value above -inf gives the raw row's argmax (0 when the raw row has none either, as on the
// host); one with +inf values gives the first +inf (the host's arithmetic is undefined there).
struct DeviceSampleRow {
  int32_t logits_row = 0;
  int32_t top_k = 0;              // <= 0 or >= vocab: off
  float inv_temperature = 1.0f;   // 1 / temperature (the host's float division)
  float top_p = 1.0f;             // >= 1: off
  float log_min_p = -INFINITY;    // std::log(min_p) as a float; -inf: off
  int32_t greedy = 0;
  int32_t want_logprob = 0;       // raw log-softmax of the token and its rank (before adjustments)
  float repetition = 1.0f;        // the repetition penalty of kSampleAdjRepeat entries
  double u = 0.0;                 // uniform in [0, 1), drawn by the host from the request's rng
  int32_t adj_begin = 0;          // the row's adjustments in the launch's adj array
  int32_t n_adj = 0;
  // With want_logprob: the n_top (<= kSampleMaxTop) most likely raw tokens and their raw
  // logprobs (compute_logprobs' top list: NaN as -inf, value descending, id ascending among
  // ties; min(n_top, vocab) entries) in the launch's top array, row i at [i * kSampleMaxTop).
  int32_t n_top = 0;
  int32_t pad[3] = {};
};

constexpr int kSampleMaxTop = 20;
struct DeviceSampleTop {
  int32_t token = 0;
  float logprob = 0.0f;  // raw logit - logsumexp(raw logits), as DeviceSampleOut::logprob
};

struct DeviceSampleOut {
  int32_t token = 0;
  int32_t rank = 0;       // 1 + tokens with a larger raw logit (want_logprob)
  float logprob = 0.0f;   // raw logit - logsumexp(raw logits) (want_logprob)
  int32_t pad = 0;
};

// out[i] for rows[i] (device arrays), over x [n_logit_rows, vocab] F32 device logits; adj:
// the rows' adjustments (n_adj_total entries, device memory); top: [n_rows, kSampleMaxTop]
// top-alternative slots (may be null when no row has n_top > 0; rows' unused slots untouched).
// A row's top list costs min(n_top, vocab) extra passes over its logits (a block argmax each,
// excluding the ids already listed by their (value, id) order). With adjustments each block
// indexes the adjusted ids in shared memory (vocab / 4 bytes: a bit and a 32-bit index per 32
// ids, so vocabularies up to about 900k ids on Hopper); cudaErrorInvalidValue beyond that.
cudaError_t launch_sample_rows(const float* x, int64_t vocab, const DeviceSampleRow* rows, int n_rows,
                               const DeviceSampleAdj* adj, int64_t n_adj_total, DeviceSampleOut* out,
                               DeviceSampleTop* top, cudaStream_t stream);

}  // namespace ember::cuda
