#pragma once
// Dense GEMM through cuBLASLt: out [n, m] F32 = x [n, k] @ w [m, k]^T, inputs BF16 (tensor
// cores, F32 accumulation) or F32 (full F32, no TF32). Plans (layouts + the heuristic's
// algorithm) are cached per shape, since a model issues a handful of shapes many times.
#include "core/dtype.h"
#include "core/status.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace ember::cuda {

class LtGemm {
 public:
  static Result<std::unique_ptr<LtGemm>> create();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // type: BF16, F32 or FP8_E4M3 (the dtype of both x and w; FP8 products are unscaled).
  // workspace: device scratch of ws_bytes. ldw / ldx: row strides of w / x in elements,
  // ldo: of out (0: k, k, m).
  Status matmul(DType type, const void* x, const void* w, float* out, int64_t n, int64_t m,
                int64_t k, void* workspace, size_t ws_bytes, cudaStream_t stream, int64_t ldw = 0,
                int64_t ldx = 0, int64_t ldo = 0);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int64_t, int64_t, int64_t, size_t, int64_t, int64_t, int64_t>;
  LtGemm() = default;
  Result<Plan*> plan(DType type, int64_t n, int64_t m, int64_t k, size_t ws_bytes, int64_t ldw,
                     int64_t ldx, int64_t ldo);
  static void destroy(Plan& p);

  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace ember::cuda
