#pragma once
// An RMSNorm that the staged packed GEMV (qgemv.cuh) applies to its x while staging it: the
// decode step's attention / MLP norm without a launch of its own. The GEMV reads the raw rows,
// and every block of its persistent grid computes their sums of squares itself (16 KiB a row
// from L2, next to megabytes of weights); block 0 also writes the normalized rows for later
// readers. The block reduction repeats the order of the RMSNorm kernel (launch_rms_norm)
// exactly, so folding the norm in changes no bit of the result. (The BF16 GEMV does not fold
// it: its thousands of short blocks would each repeat the norm; measured 8-12% slower.)
#include <cstdint>

namespace ember::cuda {

struct XNorm {
  const void* w = nullptr;  // [k] F32 or BF16 norm weight; null: no norm (x staged as it is)
  bool w_bf16 = false;
  float eps = 0.0f;
  float* out = nullptr;  // [n, k] F32: the normalized rows (written by block 0; null: not written)
};

// The largest row the fused norm takes (the register RMSNorm kernel's limit: 4 float4 for each
// of 1024 threads), and the batch rows it takes (one warp finishes each row's sum).
constexpr int64_t kXNormMaxK = 16 * 1024;
constexpr int kXNormMaxRows = 8;

// Whether a GEMV can fold this norm in: rows and width within the limits above, and the
// pointers aligned as the register RMSNorm kernel needs them (the same kernel, else the
// unfused norm would sum in another order).
inline bool xnorm_supported(int n, int64_t k, const void* x, const void* out, const void* w, bool w_bf16) {
  auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  return n >= 1 && n <= kXNormMaxRows && k % 8 == 0 && k <= kXNormMaxK && aligned(x, 16) &&
         (!out || aligned(out, 16)) && w && aligned(w, w_bf16 ? 8 : 16);
}

}  // namespace ember::cuda
