// Which cuBLASLt FP8 GEMM configuration is fastest for the decode-step shapes of a batched
// forward (Llama-3-8B: q/k/v, o, gate/up, down, lm_head, plus the fused q|k|v and gate|up a
// loader could concatenate), at the row counts a throughput run uses. For each shape: the
// heuristic's first answer (what LtGemm runs), every other algorithm the heuristic offers, and
// split-K variants of its best few, all with the per-row x / per-channel w scales applied inside
// the GEMM (outer-vector scaling) and F32 output, as the backend calls it. (On an H200 with
// cuBLAS 13 the heuristic offers one algorithm for these, without split-K; a strided batch
// over halves of k was NOT_SUPPORTED: docs/CUDA_NOTES.md "Session 6".)
//
// Prints "GEMM|m|k|n|rank|us|GB/s of weights|TFLOP/s|config" lines, fastest first, and one
// "BEST|..." line per shape with the heuristic's pick beside the fastest. Weights rotate over
// >= 768 MiB so the 60 MiB L2 serves none of them.
//
//   bench_cuda_gemm_algos [rows...]   (default 252 64)
#include "graph_timing.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_lt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// cuBLASLt calls that must succeed (the CUDA runtime's: EMBER_CUDA_CHECK).
#define LK(expr)                                                                                       \
  do {                                                                                                 \
    const cublasStatus_t _s = (expr);                                                                  \
    EMBER_CHECK(_s == CUBLAS_STATUS_SUCCESS, "{}: {}", #expr, cublasLtGetStatusName(_s));             \
  } while (0)

constexpr size_t kWorkspace = 32u << 20;

struct Shape {
  const char* name;
  int64_t m, k;
};

template <typename T>
T config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written);
  return v;
}

std::string describe(const cublasLtMatmulAlgo_t& a) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "algo %d tile %u stages %u splitk %u red %u swizzle %u custom %u cluster %u inner %u",
                config<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID), config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID), config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID));
  return buf;
}

// "h<rank of the heuristic's answer>[+split] <config>"
std::string label(int rank, bool split, const cublasLtMatmulAlgo_t& a) {
  char head[32];
  std::snprintf(head, sizeof(head), "h%d%s ", rank, split ? "+split" : "");
  return head + describe(a);
}

struct Problem : ember::cuda::LtProblem {  // the descriptor and layouts LtGemm plans
  cublasLtHandle_t lt;
  std::vector<const void*> ws_rot;  // rotating weight copies
  const void* x;
  float* out;
  const float* x_scale;
  const float* w_scale;
  void* workspace;
};

// Median microseconds per GEMM over graph replays of up to 40 launches, each on the next
// weight copy; < 0 when the launch fails.
double time_algo(Problem& p, const cublasLtMatmulAlgo_t& algo, cudaStream_t s) {
  const float alpha = 1.0f, beta = 0.0f;
  const int per_graph = static_cast<int>(std::min<size_t>(p.ws_rot.size(), 40));
  const double ms = ember::cuda::bench::graph_median_ms(s, per_graph, 5, /*warmup=*/2, [&](int i) {
    const void* w = p.ws_rot[static_cast<size_t>(i) % p.ws_rot.size()];
    return cublasLtMatmul(p.lt, p.op, &alpha, w, p.a, p.x, p.b, &beta, p.out, p.d, p.out, p.d, &algo, p.workspace,
                          kWorkspace, s) == CUBLAS_STATUS_SUCCESS;
  });
  return ms < 0 ? ms : 1e3 * ms;
}

void bench_shape(cublasLtHandle_t lt, const Shape& sh, int64_t n, void* pool, size_t pool_bytes, void* workspace,
                 cudaStream_t s) {
  const int64_t m = sh.m, k = sh.k;
  const size_t w_bytes = static_cast<size_t>(m * k);
  Problem p{};
  p.lt = lt;
  const size_t copies = std::max<size_t>(1, std::min<size_t>(pool_bytes / w_bytes, 64));
  for (size_t i = 0; i < copies; ++i) p.ws_rot.push_back(static_cast<uint8_t*>(pool) + i * w_bytes);
  void* x = nullptr;
  float *out = nullptr, *xs = nullptr, *wsc = nullptr;
  EMBER_CUDA_CHECK(cudaMalloc(&x, static_cast<size_t>(n * k)));
  EMBER_CUDA_CHECK(cudaMemset(x, 0x38, static_cast<size_t>(n * k)));  // e4m3 1.0
  EMBER_CUDA_CHECK(cudaMalloc(&out, static_cast<size_t>(n * m) * 4));
  EMBER_CUDA_CHECK(cudaMalloc(&xs, static_cast<size_t>(n) * 4));
  EMBER_CUDA_CHECK(cudaMalloc(&wsc, static_cast<size_t>(m) * 4));
  EMBER_CUDA_CHECK(cudaMemset(xs, 0, static_cast<size_t>(n) * 4));
  EMBER_CUDA_CHECK(cudaMemset(wsc, 0, static_cast<size_t>(m) * 4));
  p.x = x;
  p.out = out;
  p.x_scale = xs;
  p.w_scale = wsc;
  p.workspace = workspace;

  // The backend's own descriptor (LtGemm plans the same): e4m3 x and w, outer-vector scales, F32 out.
  const ember::Status st = ember::cuda::lt_describe(ember::DType::FP8_E4M3, n, m, k, k, k, m, wsc, xs, false, p);
  EMBER_CHECK(st.is_ok(), "{}", st.message());
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = kWorkspace;
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  std::vector<cublasLtMatmulHeuristicResult_t> heur(64);
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.d, p.d, pref, static_cast<int>(heur.size()), heur.data(),
                                    &found));
  cublasLtMatmulPreferenceDestroy(pref);

  struct Tried {
    double us;
    std::string cfg;
  };
  std::vector<Tried> tried;
  double heuristic_us = -1;
  for (int i = 0; i < found; ++i) {
    const double us = time_algo(p, heur[i].algo, s);
    if (i == 0) heuristic_us = us;
    if (us > 0) tried.push_back({us, label(i, false, heur[i].algo)});
  }
  // Split-K of the heuristic's best few: more CTAs for the shapes whose tiles leave SMs idle.
  for (int i = 0; i < std::min(found, 4); ++i) {
    uint32_t splitk_ok = 0, red_mask = 0;
    size_t written = 0;
    cublasLtMatmulAlgoCapGetAttribute(&heur[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok, sizeof(splitk_ok),
                                      &written);
    cublasLtMatmulAlgoCapGetAttribute(&heur[i].algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &red_mask,
                                      sizeof(red_mask), &written);
    if (!splitk_ok) continue;
    for (uint32_t split : {2u, 3u, 4u, 6u, 8u}) {
      for (uint32_t red : {1u, 2u, 4u}) {
        if (!(red_mask & red)) continue;
        cublasLtMatmulAlgo_t a = heur[i].algo;
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(split));
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red));
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoCheck(lt, p.op, p.a, p.b, p.d, p.d, &a, &check) != CUBLAS_STATUS_SUCCESS) continue;
        if (check.workspaceSize > kWorkspace) continue;
        const double us = time_algo(p, a, s);
        if (us > 0) tried.push_back({us, label(i, true, a)});
      }
    }
  }
  std::sort(tried.begin(), tried.end(), [](const Tried& a, const Tried& b) { return a.us < b.us; });
  const double flop = 2.0 * static_cast<double>(n * m * k);
  for (size_t r = 0; r < std::min<size_t>(tried.size(), 8); ++r)
    std::printf("GEMM|%s|%lld|%lld|%lld|%zu|%.2f|%.0f|%.0f|%s\n", sh.name, static_cast<long long>(m),
                static_cast<long long>(k), static_cast<long long>(n), r, tried[r].us, w_bytes / tried[r].us * 1e-3,
                flop / tried[r].us * 1e-6, tried[r].cfg.c_str());
  if (!tried.empty())
    std::printf("BEST|%s|%lld|%lld|%lld|heuristic %.2f us|best %.2f us|%.2fx|%d algos, %zu configs timed|%s\n",
                sh.name, static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n),
                heuristic_us, tried[0].us, heuristic_us / tried[0].us, found, tried.size(), tried[0].cfg.c_str());
  std::fflush(stdout);
  ember::cuda::lt_destroy(p);
  for (void* q : {x, static_cast<void*>(out), static_cast<void*>(xs), static_cast<void*>(wsc)}) EMBER_CUDA_CHECK(cudaFree(q));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> rows;
  for (int i = 1; i < argc; ++i) rows.push_back(std::atoll(argv[i]));
  if (rows.empty()) rows = {252, 64};
  EMBER_CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t s;
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasLtHandle_t lt;
  LK(cublasLtCreate(&lt));
  const size_t pool_bytes = size_t{768} << 20;
  void *pool = nullptr, *workspace = nullptr;
  EMBER_CUDA_CHECK(cudaMalloc(&pool, pool_bytes));
  EMBER_CUDA_CHECK(cudaMemset(pool, 0x30, pool_bytes));  // e4m3 0.5: finite, never zero
  EMBER_CUDA_CHECK(cudaMalloc(&workspace, kWorkspace));
  const Shape shapes[] = {{"q/o", 4096, 4096},      {"k/v", 1024, 4096},       {"qkv fused", 6144, 4096},
                          {"gate/up", 14336, 4096}, {"gate|up fused", 28672, 4096}, {"down", 4096, 14336},
                          {"lm_head", 128256, 4096}};
  for (int64_t n : rows)
    for (const Shape& sh : shapes) bench_shape(lt, sh, n, pool, pool_bytes, workspace, s);
  EMBER_CUDA_CHECK(cudaFree(pool));
  EMBER_CUDA_CHECK(cudaFree(workspace));
  cublasLtDestroy(lt);
  EMBER_CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}
