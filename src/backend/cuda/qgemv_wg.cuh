#pragma once
// The FP8 GEMV of a few rows of x on Hopper's FP8 tensor cores (wgmma, sm_90a): W8A8, as the
// FP8 cuBLASLt GEMM of larger batches computes it. Each block stages x once, quantized per row
// to e4m3 with scale max |x| / 448 (the bytes launch_quantize_rows_fp8 writes), as the wgmma B
// operand (N = 8 rows, K-major, 128-byte swizzle); the weights stream through a ring of 64-row x
// 128-byte boxes that the TMA engine copies (one thread issues them, no per-weight instruction
// in the loop), and one m64n8k32 wgmma a 32-byte step multiplies them in place (qgemv_wg.cu). The
// conversions the mma.sync GEMV spends most of its instructions on (e4m3 -> BF16 a weight) are
// gone; the price is x rounded to e4m3 (~3% a value) instead of BF16.
//
// Takes what launch_qgemv_multi / launch_qgemv_glu take (segments, bias, accumulate, gate/up +
// GLU, a folded RMSNorm whose result equals the unfused norm's bit for bit), for 1-4 rows of x
// (the folded norm's block reduction needs 32 threads a row) and k <= 16384.
//
// Opt-in (EMBER_CUDA_FP8_WG, qgemv.cuh): on an H200 its gate/up + GLU ran 5% faster than the
// staged mma.sync GEMV's alone and lm_head level, but batch-1 decode 5.5% slower with the GLU on
// it (one block of ~220 KiB of shared memory an SM keeps the neighbouring kernels' blocks out;
// docs/CUDA_NOTES.md "Session 31").
#include "backend/cuda/qgemv.cuh"

#include <cuda_runtime.h>

namespace ember::cuda {

constexpr int kQGemvWgMaxRows = 4;
constexpr int64_t kQGemvWgMaxK = 16384;

// Whether the FP8 wgmma GEMV takes n rows of width k on the current device (an sm_90a build on a
// compute capability 9.0 GPU, the tensor-map entry point found).
bool qgemv_fp8_wg_takes(int n, int64_t k);

// Kinds of GEMV the path Auto may hand to this kernel (bits of EMBER_CUDA_FP8_WG_KINDS).
enum QGemvWgKind : int { kWgGlu = 1, kWgLmHead = 2, kWgPlain = 4, kWgNorm = 8 };
// The kind of a launch: gate/up + GLU, or a plain GEMV of `rows` output rows in all (lm_head:
// 65,536 or more) with or without a folded norm.
inline int qgemv_wg_kind(bool glu, int64_t rows, bool norm) {
  return glu ? kWgGlu : norm ? kWgNorm : rows >= 64 * 1024 ? kWgLmHead : kWgPlain;
}
// Whether Auto takes this kernel: at most EMBER_CUDA_FP8_WG rows (default 0: never) and a kind in
// EMBER_CUDA_FP8_WG_KINDS (default kWgGlu), where qgemv_fp8_wg_takes.
bool qgemv_fp8_wg_wanted(int n, int64_t k, int kind);

// One launch of the problem as launch_qgemv_multi / launch_qgemv_glu set it up (QGemvProblem:
// tile_end counts 16-row tiles there; this kernel recounts its own 64-row tiles).
cudaError_t launch_qgemv_fp8_wg(const QGemvProblem& p, bool glu, bool pdl, cudaStream_t stream);

}  // namespace ember::cuda
