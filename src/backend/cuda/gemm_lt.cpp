#include "backend/cuda/gemm_lt.h"

namespace ember::cuda {

namespace {

#define LT_TRY(expr)                                                                      \
  do {                                                                                    \
    cublasStatus_t _s = (expr);                                                           \
    if (_s != CUBLAS_STATUS_SUCCESS)                                                      \
      return Status::errorf("{} failed: {} ({})", #expr, cublasLtGetStatusName(_s),       \
                            cublasLtGetStatusString(_s));                                 \
  } while (0)

}  // namespace

Result<std::unique_ptr<LtGemm>> LtGemm::create() {
  std::unique_ptr<LtGemm> g(new LtGemm());
  LT_TRY(cublasLtCreate(&g->handle_));
  return g;
}

LtGemm::~LtGemm() {
  for (auto& [key, p] : plans_) lt_destroy(p);
  if (handle_) cublasLtDestroy(handle_);
}

void lt_destroy(LtProblem& p) {
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.d) cublasLtMatrixLayoutDestroy(p.d);
  p = LtProblem{};
}

Status lt_describe(DType type, int64_t n, int64_t m, int64_t k, int64_t ldw, int64_t ldx, int64_t ldo,
                   const float* a_scale, const float* b_scale, bool out_bf16, LtProblem& p) {
  // Column-major view of the row-major problem: D [m, n] = op(A) [m, k] * B [k, n], where
  // A is w stored as [k, m] (ld k) and transposed, B is x stored as [k, n] (ld k).
  const cudaDataType_t in = type == DType::BF16 ? CUDA_R_16BF : type == DType::FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_32F;
  const Status st = [&]() -> Status {
    LT_TRY(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LT_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (a_scale) {
      // A is w (its M = m rows of out), B is x (N = n): w_scale [m] and x_scale [n].
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      LT_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
      LT_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
      // The heuristic refuses vector scaling without the vectors (they are reset per call).
      LT_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
      LT_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&p.a, in, static_cast<uint64_t>(k), static_cast<uint64_t>(m), ldw));
    LT_TRY(cublasLtMatrixLayoutCreate(&p.b, in, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ldx));
    LT_TRY(cublasLtMatrixLayoutCreate(&p.d, out_bf16 ? CUDA_R_16BF : CUDA_R_32F, static_cast<uint64_t>(m),
                                      static_cast<uint64_t>(n), ldo));
    return Status::ok();
  }();
  if (!st.is_ok()) lt_destroy(p);
  return st;
}

Result<LtGemm::Plan*> LtGemm::plan(DType type, int64_t n, int64_t m, int64_t k, size_t ws_bytes,
                                   int64_t ldw, int64_t ldx, int64_t ldo, const float* a_scale,
                                   const float* b_scale, bool out_bf16) {
  const bool outer_scales = a_scale != nullptr;
  const Key key{static_cast<int>(type) | (outer_scales ? 1 << 16 : 0) | (out_bf16 ? 1 << 17 : 0), n, m, k, ws_bytes,
                ldw, ldx, ldo};
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  Plan p;
  EMBER_RETURN_IF_ERROR(lt_describe(type, n, m, k, ldw, ldx, ldo, a_scale, b_scale, out_bf16, p));
  Status st = [&]() -> Status {
    cublasLtMatmulPreference_t pref = nullptr;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    LT_TRY(s);
    if (found == 0)
      return Status::errorf("cuBLASLt has no algorithm for {} x {} x {} ({})", n, m, k, dtype_name(type));
    p.algo = result.algo;
    return Status::ok();
  }();
  if (!st.is_ok()) {
    lt_destroy(p);
    return st;
  }
  auto [it, inserted] = plans_.emplace(key, p);
  return &it->second;
}

Status LtGemm::matmul(DType type, const void* x, const void* w, void* out, int64_t n, int64_t m,
                      int64_t k, void* workspace, size_t ws_bytes, cudaStream_t stream, int64_t ldw,
                      int64_t ldx, int64_t ldo, bool accumulate, DType out_type) {
  if (type != DType::BF16 && type != DType::F32 && type != DType::FP8_E4M3)
    return Status::errorf("cuBLASLt GEMM: unsupported dtype {}", dtype_name(type));
  if ((out_type != DType::F32 && out_type != DType::BF16) || (out_type == DType::BF16 && accumulate))
    return Status::errorf("cuBLASLt GEMM: unsupported output {}{}", dtype_name(out_type),
                          accumulate ? " with accumulate" : "");
  if (n == 0 || m == 0) return Status::ok();
  EMBER_ASSIGN_OR_RETURN(Plan * p, plan(type, n, m, k, ws_bytes, ldw > 0 ? ldw : k, ldx > 0 ? ldx : k,
                                        ldo > 0 ? ldo : m, nullptr, nullptr, out_type == DType::BF16));
  return run(*p, x, w, out, workspace, ws_bytes, stream, accumulate);
}

Status LtGemm::run(Plan& p, const void* x, const void* w, void* out, void* workspace, size_t ws_bytes,
                   cudaStream_t stream, bool accumulate) {
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  LT_TRY(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.d, out, p.d, &p.algo,
                        workspace, ws_bytes, stream));
  return Status::ok();
}

Status LtGemm::matmul_fp8_scaled(const void* x, const void* w, void* out, int64_t n, int64_t m, int64_t k,
                                 const float* x_scale, const float* w_scale, void* workspace, size_t ws_bytes,
                                 cudaStream_t stream, int64_t ld, bool accumulate, DType out_type) {
  if ((out_type != DType::F32 && out_type != DType::BF16) || (out_type == DType::BF16 && accumulate))
    return Status::errorf("cuBLASLt FP8 GEMM: unsupported output {}{}", dtype_name(out_type),
                          accumulate ? " with accumulate" : "");
  if (n == 0 || m == 0) return Status::ok();
  if (ld <= 0) ld = k;
  EMBER_ASSIGN_OR_RETURN(Plan * p, plan(DType::FP8_E4M3, n, m, k, ws_bytes, ld, ld, m, w_scale, x_scale,
                                        out_type == DType::BF16));
  // The scale vectors change with every weight and step: set on the plan's descriptor per call
  // (one thread drives the backend's stream, so the cached descriptor is never shared).
  LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale)));
  LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale)));
  return run(*p, x, w, out, workspace, ws_bytes, stream, accumulate);
}

}  // namespace ember::cuda
