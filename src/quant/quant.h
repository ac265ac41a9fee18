#pragma once
// Reference (plain C++) conversion between float and every storage format ember reads.
// One place for the math of each format, used by loaders, kernels' tests and tools.
#include "core/dtype.h"

#include <cstdint>

namespace ember::quant {

// True when dequantize_row supports t (F32, F16, BF16, all GGML quant types listed in
// blocks.h, FP8).
bool can_dequantize(DType t);
// Converts n elements (a multiple of t's block size) of format t at src into floats.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// True when quantize_row supports t.
bool can_quantize(DType t);
// Quantizes n floats (a multiple of t's block size) into format t, round-to-nearest, as
// GGML's reference quantizers do (so that activations quantized by ember match llama.cpp's).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace ember::quant
