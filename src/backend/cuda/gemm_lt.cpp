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
  for (auto& [key, p] : plans_) destroy(p);
  if (handle_) cublasLtDestroy(handle_);
}

void LtGemm::destroy(Plan& p) {
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.d) cublasLtMatrixLayoutDestroy(p.d);
  p = Plan{};
}

Result<LtGemm::Plan*> LtGemm::plan(DType type, int64_t n, int64_t m, int64_t k, size_t ws_bytes,
                                   int64_t ldw, int64_t ldx, int64_t ldo) {
  const Key key{static_cast<int>(type), n, m, k, ws_bytes, ldw, ldx, ldo};
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  // Column-major view of the row-major problem: D [m, n] = op(A) [m, k] * B [k, n], where
  // A is w stored as [k, m] (ld k) and transposed, B is x stored as [k, n] (ld k).
  const cudaDataType_t in = type == DType::BF16 ? CUDA_R_16BF : type == DType::FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_32F;
  Plan p;
  auto fail = [&](Status s) {
    destroy(p);
    return s;
  };
  Status st = [&]() -> Status {
    LT_TRY(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LT_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    LT_TRY(cublasLtMatrixLayoutCreate(&p.a, in, static_cast<uint64_t>(k), static_cast<uint64_t>(m), ldw));
    LT_TRY(cublasLtMatrixLayoutCreate(&p.b, in, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ldx));
    LT_TRY(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, static_cast<uint64_t>(m), static_cast<uint64_t>(n), ldo));
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
  if (!st.is_ok()) return fail(st);
  auto [it, inserted] = plans_.emplace(key, p);
  return &it->second;
}

Status LtGemm::matmul(DType type, const void* x, const void* w, float* out, int64_t n, int64_t m,
                      int64_t k, void* workspace, size_t ws_bytes, cudaStream_t stream, int64_t ldw,
                      int64_t ldx, int64_t ldo) {
  if (type != DType::BF16 && type != DType::F32 && type != DType::FP8_E4M3)
    return Status::errorf("cuBLASLt GEMM: unsupported dtype {}", dtype_name(type));
  if (n == 0 || m == 0) return Status::ok();
  EMBER_ASSIGN_OR_RETURN(Plan * p, plan(type, n, m, k, ws_bytes, ldw > 0 ? ldw : k, ldx > 0 ? ldx : k,
                                        ldo > 0 ? ldo : m));
  const float alpha = 1.0f, beta = 0.0f;
  LT_TRY(cublasLtMatmul(handle_, p->op, &alpha, w, p->a, x, p->b, &beta, out, p->d, out, p->d,
                        &p->algo, workspace, ws_bytes, stream));
  return Status::ok();
}

}  // namespace ember::cuda
