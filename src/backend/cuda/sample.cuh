#pragma once
// Sampling on the GPU: greedy (argmax) over logit rows, so that a step whose requests are all
// greedy downloads one token id per row instead of the whole vocabulary.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace ember::cuda {

// out[r] = the index of the largest value of row r of x [n_rows, vocab] F32 (row-major):
// NaN never wins, the lowest index wins among equal values, -inf is never picked; a row with
// no value above -inf gives 0. The host sampler's greedy pick on the same row is the same
// (sample/sampler.cpp: NaN -> -inf, first maximum, fallback token 0).
cudaError_t launch_argmax_rows(const float* x, int n_rows, int64_t vocab, int32_t* out,
                               cudaStream_t stream);

// One row of a sampled step, as the host Sampler defines it (sample/sampler.cpp,
// logits_processors.cpp) for requests without bias, penalties or pending min_tokens:
// x = logits with NaN -> -inf; greedy: the argmax rule above; otherwise x *= inv_temperature,
// min_p keeps x >= max + log_min_p, top_k keeps x >= the k-th largest (ties kept), top_p keeps
// the shortest prefix of the (x descending, id ascending) order whose mass reaches top_p, and
// the token is the first id (ascending) whose cumulative kept mass exceeds u * (kept mass).
// Masses are exp(x - max) in fixed point (2^-44 units of the largest, integer sums: the same
// bits every run); a token below 2^-44 of the largest is never drawn. A row whose x has no
// value above -inf gives 0; one with +inf values gives the first +inf (the host's arithmetic
// is undefined there).
struct DeviceSampleRow {
  int32_t logits_row = 0;
  int32_t top_k = 0;              // <= 0 or >= vocab: off
  float inv_temperature = 1.0f;   // 1 / temperature (the host's float division)
  float top_p = 1.0f;             // >= 1: off
  float log_min_p = -INFINITY;    // std::log(min_p) as a float; -inf: off
  int32_t greedy = 0;
  int32_t want_logprob = 0;       // raw log-softmax of the token and its rank
  int32_t pad = 0;
  double u = 0.0;                 // uniform in [0, 1), drawn by the host from the request's rng
};

struct DeviceSampleOut {
  int32_t token = 0;
  int32_t rank = 0;       // 1 + tokens with a larger raw logit (want_logprob)
  float logprob = 0.0f;   // raw logit - logsumexp(raw logits) (want_logprob)
  int32_t pad = 0;
};

// out[i] for rows[i] (device arrays), over x [n_logit_rows, vocab] F32 device logits.
cudaError_t launch_sample_rows(const float* x, int64_t vocab, const DeviceSampleRow* rows, int n_rows,
                               DeviceSampleOut* out, cudaStream_t stream);

}  // namespace ember::cuda
