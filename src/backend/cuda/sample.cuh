#pragma once
// Sampling on the GPU: greedy (argmax) over logit rows, so that a step whose requests are all
// greedy downloads one token id per row instead of the whole vocabulary.
#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

// out[r] = the index of the largest value of row r of x [n_rows, vocab] F32 (row-major):
// NaN never wins, the lowest index wins among equal values, -inf is never picked; a row with
// no value above -inf gives 0. The host sampler's greedy pick on the same row is the same
// (sample/sampler.cpp: NaN -> -inf, first maximum, fallback token 0).
cudaError_t launch_argmax_rows(const float* x, int n_rows, int64_t vocab, int32_t* out,
                               cudaStream_t stream);

}  // namespace ember::cuda
