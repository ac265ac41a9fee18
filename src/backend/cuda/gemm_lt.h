#pragma once
// Dense GEMM through cuBLASLt: out [n, m] F32 = x [n, k] @ w [m, k]^T, inputs BF16 (tensor
// cores, F32 accumulation) or F32 (full F32, no TF32). Plans (layouts + the heuristic's
// algorithm) are cached per shape, since a model issues a handful of shapes many times. (Timing
// the heuristic's best eight per shape was tried: no faster at batched decode, and two
// processes could pick different algorithms, so the same seed gave different tokens.)
#include "core/dtype.h"
#include "core/status.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace ember::cuda {

// The matmul descriptor and layouts of one GEMM as LtGemm plans it: the column-major view of
// out [n, m] = x [n, k] @ w [m, k]^T (type: BF16, F32 or FP8_E4M3 for x and w; ldw / ldx /
// ldo row strides in elements), with per-row / per-channel outer-vector scales when a_scale
// (w's, [m]) and b_scale (x's, [n]) are given, BF16 output with out_bf16. For tools that time
// other cuBLASLt algorithms on exactly the backend's problem (bench_cuda_gemm_algos).
struct LtProblem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
};
Status lt_describe(DType type, int64_t n, int64_t m, int64_t k, int64_t ldw, int64_t ldx, int64_t ldo,
                   const float* a_scale, const float* b_scale, bool out_bf16, LtProblem& p);
void lt_destroy(LtProblem& p);

class LtGemm {
 public:
  static Result<std::unique_ptr<LtGemm>> create();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // type: BF16, F32 or FP8_E4M3 (the dtype of both x and w; FP8 products are unscaled).
  // workspace: device scratch of ws_bytes. ldw / ldx: row strides of w / x in elements,
  // ldo: of out (0: k, k, m).
  // accumulate: out += x @ w^T (the GEMM reads out as its C) instead of out = x @ w^T.
  // out_type: F32, or BF16 (out then holds BF16; not with accumulate).
  Status matmul(DType type, const void* x, const void* w, void* out, int64_t n, int64_t m,
                int64_t k, void* workspace, size_t ws_bytes, cudaStream_t stream, int64_t ldw = 0,
                int64_t ldx = 0, int64_t ldo = 0, bool accumulate = false, DType out_type = DType::F32);
  // FP8 e4m3 x [n, k] and w [m, k] with one scale per row of each, applied inside the GEMM by
  // cuBLASLt's outer-vector scaling: out[j, r] = x_scale[j] * w_scale[r] * (x_j . w_r).
  // An error when this cuBLASLt / GPU offers no such algorithm (the caller scales itself).
  // ld: the row stride of x and w in bytes (0: k), for a GEMM over a slice of their columns.
  // out_type: F32, or BF16 (out then holds [n, m] BF16; not with accumulate).
  Status matmul_fp8_scaled(const void* x, const void* w, void* out, int64_t n, int64_t m, int64_t k,
                           const float* x_scale, const float* w_scale, void* workspace, size_t ws_bytes,
                           cudaStream_t stream, int64_t ld = 0, bool accumulate = false,
                           DType out_type = DType::F32);

 private:
  struct Plan : LtProblem {
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int64_t, int64_t, int64_t, size_t, int64_t, int64_t, int64_t>;
  LtGemm() = default;
  Result<Plan*> plan(DType type, int64_t n, int64_t m, int64_t k, size_t ws_bytes, int64_t ldw,
                     int64_t ldx, int64_t ldo, const float* a_scale = nullptr, const float* b_scale = nullptr,
                     bool out_bf16 = false);
  Status run(Plan& p, const void* x, const void* w, void* out, void* workspace, size_t ws_bytes,
             cudaStream_t stream, bool accumulate);

  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace ember::cuda
