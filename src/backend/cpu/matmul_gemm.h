#pragma once
// Panel GEMM for many activation rows (internal to the CPU backend; see matmul_gemm.cpp).
#include "backend/cpu/context.h"

namespace ember::cpu {

// out[n, m] = x[n, k] @ w[m, k]^T (+ bias), using gk's decoder and micro-kernel.
void run_panel_gemm(CpuContext& ctx, const GemmKernel& gk, ActFormat act, const float* x, int64_t n, int64_t k,
                    const uint8_t* w, size_t w_stride, int64_t m, float* out, const float* bias);

}  // namespace ember::cpu
