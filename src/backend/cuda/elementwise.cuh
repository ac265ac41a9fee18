#pragma once
// Launchers of the small per-element CUDA kernels: dtype conversion, RMSNorm, RoPE, GLU, add,
// scale, bias. Plain C++ declarations so host code built by g++ can call them. Each returns
// the launch's error (cudaGetLastError), which the caller checks. pdl: launch as a
// programmatic dependent of the previous kernel; release_early: let the next one start before
// this one's wait (pdl_enter in device_util.cuh).
#include "backend/cuda/qgemv.cuh"
#include "core/dtype.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

// dst[i] = src[i] converted; src_type, dst_type in {F32, F16, BF16}.
cudaError_t launch_convert(DType src_type, const void* src, DType dst_type, void* dst, int64_t n,
                           cudaStream_t stream);

// out = x / sqrt(mean(x^2) + eps) * w per row.   x, out [rows, d] F32 (may alias);
// w [d] F32 or BF16. With pdl, the register kernel (this launcher's, and the two below's) reads
// w before its PDL wait, so w must not be written by the kernels before it in the stream (the
// norms take model weights).
cudaError_t launch_rms_norm(const float* x, const void* w, DType w_type, float eps, float* out,
                            int64_t rows, int64_t d, cudaStream_t stream, bool pdl = false,
                            bool release_early = false);

// sum = a + b; out = sum / sqrt(mean(sum^2) + eps) * w per row (residual add + the next norm
// in one pass).   a, b, sum, out [rows, d] F32 (sum may alias a or b, out may alias sum).
cudaError_t launch_add_rms_norm(const float* a, const float* b, float* sum, const void* w,
                                DType w_type, float eps, float* out, int64_t rows, int64_t d,
                                cudaStream_t stream, bool pdl = false, bool release_early = false);

// The x rows of the GEMM that reads a norm's or GLU's output, written by that kernel on the
// way out: e4m3 with one scale per row (fq.q set; the same bytes launch_quantize_rows_fp8 would
// make of the output), or BF16 [rows, cols] (bf16 set; launch_convert's values). One of them.
struct GemmRowsOut {
  Fp8RowsOut fq;
  void* bf16 = nullptr;
};

// The RMSNorm above (b null) or the add + RMSNorm (b given), also writing out's rows for the
// GEMM that reads them (ro); out null: only those rows (and sum). cudaErrorNotSupported when
// the row does not fit the register kernel (d % 4 != 0, d > 16384, unaligned pointers):
// nothing is launched then.
cudaError_t launch_rms_norm_rows(const float* a, const float* b, float* sum, const void* w, DType w_type, float eps,
                                 float* out, int64_t rows, int64_t d, const GemmRowsOut& ro, cudaStream_t stream,
                                 bool pdl = false, bool release_early = false);

// Rotates x in place.   x [n, n_heads, head_dim] F32; positions [n] and inv_freq
// [rotary_dim / 2] in device memory.
cudaError_t launch_rope(float* x, const int32_t* positions, const float* inv_freq, int64_t n,
                        int n_heads, int head_dim, int rotary_dim, bool neox,
                        float attention_factor, cudaStream_t stream, bool pdl = false);
// The same rotation of two tensors in one launch (q [n, n_heads1, head_dim] and k [n,
// n_heads2, head_dim] of one step).
cudaError_t launch_rope2(float* x1, int n_heads1, float* x2, int n_heads2,
                         const int32_t* positions, const float* inv_freq, int64_t n, int head_dim,
                         int rotary_dim, bool neox, float attention_factor, cudaStream_t stream,
                         bool pdl = false);

// out = act(gate) * up, act silu or gelu-tanh.   all [n] F32; out may alias gate.
cudaError_t launch_glu(const float* gate, const float* up, bool gelu_tanh, float* out, int64_t n,
                       cudaStream_t stream, bool pdl = false);

// The GLU above on rows [rows, cols] of F32 or BF16 (in_type) gate and up, one block a row:
// out F32 (null: not written, ro required), and with ro also out's rows for the GEMM that
// reads them (see launch_rms_norm_rows). cudaErrorNotSupported (nothing launched) when
// cols % 4 != 0, cols > 16384 or a pointer is not aligned to 4 elements (16 bytes for out).
cudaError_t launch_glu_rows(DType in_type, const void* gate, const void* up, bool gelu_tanh, float* out, int64_t rows,
                            int64_t cols, const GemmRowsOut* ro, cudaStream_t stream, bool pdl = false);

// out = a + b.   all [n] F32; out may alias a or b.
cudaError_t launch_add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream,
                       bool pdl = false);

// x *= s.   x [n] F32.
cudaError_t launch_scale(float* x, float s, int64_t n, cudaStream_t stream);
// x = cap * tanh(x / cap) in place.
cudaError_t launch_softcap(float* x, float cap, int64_t n, cudaStream_t stream);

// out[r, :] += bias.   out [rows, m] F32, bias [m] F32.
cudaError_t launch_add_bias(float* out, const float* bias, int64_t rows, int64_t m,
                            cudaStream_t stream);

// dst = src for bytes (a multiple of 16, both 16-byte aligned) with SM loads and stores: the
// device-to-device bandwidth ceiling that benchmarks report beside their kernels, and a step's
// small metadata upload from pinned host memory the device addresses (unified addressing), with
// no copy-engine transfer on the stream.
cudaError_t launch_copy16(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// Fills n bytes with a byte value (tests poison outputs with 0xff: NaN in F32 / BF16).
cudaError_t launch_fill_bytes(void* dst, uint8_t value, size_t n, cudaStream_t stream);

// Fills x [n] with uniform values in [lo, hi) from a counter-based hash of (seed, i), for
// benchmarks that need gigabytes of random data without a host upload. dst F32/F16/BF16.
cudaError_t launch_fill_random(DType type, void* dst, int64_t n, uint64_t seed, float lo,
                               float hi, cudaStream_t stream);

}  // namespace ember::cuda
