#pragma once
// Panel GEMM for many activation rows (internal to the CPU backend; see matmul_gemm.cpp).
#include "backend/cpu/context.h"

#include <span>

namespace ember::cpu {

// One weight of a panel GEMM: out[n, m] = x[n, k] @ w[m, k]^T (+ bias).
struct GemmTarget {
  const uint8_t* w;
  size_t w_stride;
  int64_t m;
  float* out;
  const float* bias;  // null: none
};

// Every target against the same x (q/k/v, gate/up: the panels are built once and one pool
// run covers all their columns), using gk's kernels; the targets share gk's weight kind.
void run_panel_gemm(CpuContext& ctx, const GemmKernel& gk, ActFormat act, const float* x, int64_t n, int64_t k,
                    std::span<const GemmTarget> targets);

}  // namespace ember::cpu
