// Kernel benchmarks of the CUDA backend on one GPU, beside the ceilings measured in the same
// run: a device-to-device copy (bytes read + written) and cuBLASLt. Prints one
// "RESULT|group|name|value|unit|note" line per number (scripts/gpu-check.sh tabulates them).
//
// Inputs are random (never zeros) and each timed set of weights/caches is several times the
// L2 cache, rotating buffers where one copy would fit in it. Short kernels are timed as CUDA
// graph replays of many launches, the way a decode step runs them.
#include "graph_timing.h"
#include "pdl_chain.h"
#include "backend/cuda/attn_o.cuh"
#include "backend/cuda/attn_o_split.cuh"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/qgemm.cuh"
#include "backend/cuda/qgemm_wg.cuh"
#include "backend/cuda/qgemv.cuh"
#include "backend/cuda/rows.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace ember;
using namespace ember::cuda;

#define CK(expr)                                                                           \
  do {                                                                                     \
    const cudaError_t _e = (expr);                                                         \
    if (_e != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(_e)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

void result(const char* group, const std::string& name, double value, const char* unit,
            const std::string& note = "") {
  std::printf("RESULT|%s|%s|%.3f|%s|%s\n", group, name.c_str(), value, unit, note.c_str());
  std::fflush(stdout);
}

void* dmalloc(size_t bytes) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  return p;
}

// Median milliseconds per call of fn, captured `per_graph` times into one graph.
double time_graph(cudaStream_t s, int per_graph, int reps, const std::function<void(int)>& fn) {
  return cuda::bench::graph_median_ms(s, per_graph, reps, /*warmup=*/3, [&](int i) {
    fn(i);
    return true;
  });
}

double copy_bandwidth(cudaStream_t s) {
  const size_t bytes = size_t{2} << 30;
  void* src = dmalloc(bytes);
  void* dst = dmalloc(bytes);
  CK(launch_fill_random(DType::F32, src, static_cast<int64_t>(bytes / 4), 1, -1.0f, 1.0f, s));
  const double ms = time_graph(s, 4, 7, [&](int) { CK(launch_copy16(dst, src, bytes, s)); });
  const double ms_ce = time_graph(s, 4, 7, [&](int) {
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
  });
  CK(cudaFree(src));
  CK(cudaFree(dst));
  const double gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  result("ceiling", "d2d copy kernel 2 GiB (read+write)", gbs, "GB/s");
  result("ceiling", "d2d cudaMemcpyAsync in a graph 2 GiB", 2.0 * bytes / (ms_ce * 1e-3) / 1e9, "GB/s");
  return gbs;
}

void bench_gemv(cudaStream_t s, double copy_gbs, LtGemm& lt) {
  struct Shape { int64_t m, k; const char* what; };
  const Shape shapes[] = {{4096, 4096, "q/o proj"}, {14336, 4096, "gate/up"},
                          {4096, 14336, "down"}, {128256, 4096, "lm_head"}};
  void* ws = dmalloc(32u << 20);
  for (const auto& sh : shapes) {
    const size_t wbytes = static_cast<size_t>(sh.m * sh.k) * 2;
    const int copies = static_cast<int>(std::max<size_t>(1, (size_t{512} << 20) / wbytes + 1));
    std::vector<void*> w(copies);
    for (int c = 0; c < copies; ++c) {
      w[c] = dmalloc(wbytes);
      CK(launch_fill_random(DType::BF16, w[c], sh.m * sh.k, 10 + c, -0.05f, 0.05f, s));
    }
    auto* x = static_cast<float*>(dmalloc(static_cast<size_t>(kGemvMaxBatch * sh.k) * 4));
    void* xb = dmalloc(static_cast<size_t>(sh.k) * 2);
    auto* y = static_cast<float*>(dmalloc(static_cast<size_t>(kGemvMaxBatch * sh.m) * 4));
    CK(launch_fill_random(DType::F32, x, kGemvMaxBatch * sh.k, 3, -1.0f, 1.0f, s));
    CK(launch_convert(DType::F32, x, DType::BF16, xb, sh.k, s));
    const std::string shape = std::to_string(sh.m) + "x" + std::to_string(sh.k) + " " + sh.what;
    const int per_graph = std::max(copies * 4, 16);
    // Variant v on n rows of x, plainly or as programmatic dependent launches (each GEMV of the
    // chain overlaps the previous one's tail, as in decode).
    auto time_variant = [&](int n, int v, bool pdl) {
      const double ms = time_graph(s, per_graph, 9, [&](int i) {
        CK(launch_gemv_bf16(w[i % copies], x, nullptr, y, n, sh.m, sh.k, v, pdl, s));
      });
      const double gbs = wbytes / (ms * 1e-3) / 1e9;
      char note[96];
      const bool hold = v == kGemvHoldVariant || v == kGemvHold2Variant;
      std::snprintf(note, sizeof note, "%.1f us, %.0f%% of copy%s", ms * 1e3, 100.0 * gbs / copy_gbs,
                    v == gemv_pick_variant(n, sh.m, sh.k)                    ? ", backend pick"
                    : hold && !gemv_hold_applies(v, n, sh.m, sh.k) ? ", ran variant 7"
                    : hold                                             ? ", weights held before the wait"
                                                                       : "");
      const std::string rows = n == 1 ? "" : "n=" + std::to_string(n) + " ";
      result("gemv", "ember bf16 " + rows + "v" + std::to_string(v) + (pdl ? "+pdl" : "") + " (" +
                         std::to_string(kGemvVariants[v].rows_per_warp) + "r x" +
                         std::to_string(kGemvVariants[v].unroll) + " /" +
                         std::to_string(kGemvVariants[v].k_splits) + ") " + shape,
             gbs, "GB/s", note);
    };
    // One row: every variant plainly, then as dependents; 2 and 4 rows (small decode batches):
    // every variant that takes them, as dependents.
    for (const bool pdl : {false, true})
      for (int v = 0; v < kGemvNumVariants; ++v) time_variant(1, v, pdl);
    for (int n : {2, 4})
      for (int v = 0; v < kGemvNumVariants; ++v)
        if (gemv_variant_takes(v, n, sh.k) && v != kGemvHoldVariant && v != kGemvHold2Variant)
          time_variant(n, v, true);
    const double ms = time_graph(s, per_graph, 9, [&](int i) {
      const Status st = lt.matmul(DType::BF16, xb, w[i % copies], y, 1, sh.m, sh.k, ws, 32u << 20, s);
      if (!st.is_ok()) {
        std::fprintf(stderr, "cublasLt: %s\n", st.message().c_str());
        std::exit(1);
      }
    });
    const double gbs = wbytes / (ms * 1e-3) / 1e9;
    char note[64];
    std::snprintf(note, sizeof note, "%.1f us, %.0f%% of copy", ms * 1e3, 100.0 * gbs / copy_gbs);
    result("gemv", "cublasLt bf16 n=1 " + shape, gbs, "GB/s", note);
    for (void* p : w) CK(cudaFree(p));
    CK(cudaFree(x));
    CK(cudaFree(xb));
    CK(cudaFree(y));
  }
  CK(cudaFree(ws));
}

// Copies of one packed [m, k] matrix (enough to stream 512 MiB, so L2 holds none between launches)
// with x [8, k] and room for [8, 2 m] outputs, for the packed GEMV benches.
struct PackedGemvData {
  size_t qbytes = 0;
  std::vector<void*> w;
  float* x = nullptr;
  float* y = nullptr;
  // exact_copies > 0: that many copies instead (1: every launch reads the same weights).
  PackedGemvData(QFormat f, int64_t m, int64_t k, int min_copies, cudaStream_t s, int exact_copies = 0)
      : qbytes(qweight_bytes(f, m, k)) {
    w.resize(exact_copies > 0 ? static_cast<size_t>(exact_copies)
                              : std::max<size_t>(min_copies, (size_t{512} << 20) / qbytes + 1));
    void* src = dmalloc(static_cast<size_t>(m * k) * 2);
    CK(launch_fill_random(DType::BF16, src, m * k, 10, -0.05f, 0.05f, s));
    for (void*& p : w) {
      p = dmalloc(qbytes);
      CK(launch_qweight_pack(f, 2, src, 0, m, m, k, p, s));
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaFree(src));
    x = static_cast<float*>(dmalloc(static_cast<size_t>(8 * k) * 4));
    y = static_cast<float*>(dmalloc(static_cast<size_t>(8 * m) * 4 * 2));
    CK(launch_fill_random(DType::F32, x, 8 * k, 3, -1.0f, 1.0f, s));
  }
  PackedGemvData(const PackedGemvData&) = delete;
  PackedGemvData& operator=(const PackedGemvData&) = delete;
  ~PackedGemvData() {
    for (void* p : w) CK(cudaFree(p));
    CK(cudaFree(x));
    CK(cudaFree(y));
  }
  int copies() const { return static_cast<int>(w.size()); }
  // Launch i: the GEMV of copy i (glu: gate copy i, up copy i + 1) at n rows.
  void launch(int i, QFormat f, int64_t m, int64_t k, int n, bool glu, QGemvPath path, cudaStream_t s) const {
    if (glu) {
      CK(launch_qgemv_glu(f, w[i % copies()], w[(i + 1) % copies()], x, n, m, k, false, y, nullptr, nullptr, true, s,
                          path));
      return;
    }
    QGemvSeg seg;
    seg.w = w[i % copies()];
    seg.out = y;
    seg.m = m;
    CK(launch_qgemv_multi(f, &seg, 1, x, n, k, /*pdl=*/true, s, path));
  }
};

// What the backend ran for packed int4 / int8 weights past the GEMV before the packed GEMMs
// (matmul_packed_large): x to BF16, then the weights dequantized to BF16 `slab` rows at a time
// into wb, each slab a BF16 cuBLASLt GEMM into its output columns.
void dequant_lt_gemm(LtGemm& lt, QFormat f, const void* w, const float* x, void* xb, void* wb, int64_t slab, float* y,
                     int n, int64_t m, int64_t k, void* ws, cudaStream_t s) {
  CK(launch_convert(DType::F32, x, DType::BF16, xb, n * k, s));
  for (int64_t r0 = 0; r0 < m; r0 += slab) {
    const int64_t nr = std::min(slab, m - r0);
    CK(launch_qweight_dequant(f, w, m, k, nullptr, r0, nr, wb, true, false, s));
    const Status st = lt.matmul(DType::BF16, xb, wb, y + r0, n, nr, k, ws, 32u << 20, s, k, k, m);
    if (!st.is_ok()) {
      std::fprintf(stderr, "cublasLt: %s\n", st.message().c_str());
      std::exit(1);
    }
  }
}

// What the packed-GEMM benches hold for one shape: x [max_n, k] F32 (random) and room for its
// BF16 copy, y [max_n, m], the packed GEMMs' x scratch (xq_bytes), and for the peers the
// fallback's dequantized slab (dequant_lt_gemm) and one BF16 copy of the weights w.
struct GemmBenchBuffers {
  float* x = nullptr;
  float* y = nullptr;
  void* xq = nullptr;
  void* xb = nullptr;
  void* wb = nullptr;
  void* wfull = nullptr;
  int64_t slab = 0;
  GemmBenchBuffers(QFormat f, const void* w, int64_t m, int64_t k, int max_n, size_t xq_bytes, cudaStream_t s)
      : slab(std::min<int64_t>(std::max<int64_t>(16, (int64_t{64} << 20) / (k * 2) / 16 * 16), (m + 15) / 16 * 16)) {
    x = static_cast<float*>(dmalloc(static_cast<size_t>(max_n * k) * 4));
    y = static_cast<float*>(dmalloc(static_cast<size_t>(max_n * m) * 4));
    xq = dmalloc(xq_bytes);
    xb = dmalloc(static_cast<size_t>(max_n * k) * 2);
    wb = dmalloc(static_cast<size_t>(slab * k) * 2);
    wfull = dmalloc(static_cast<size_t>(m * k) * 2);
    CK(launch_fill_random(DType::F32, x, max_n * k, 5, -1.0f, 1.0f, s));
    CK(launch_qweight_dequant(f, w, m, k, nullptr, 0, m, wfull, true, false, s));
  }
  GemmBenchBuffers(const GemmBenchBuffers&) = delete;
  GemmBenchBuffers& operator=(const GemmBenchBuffers&) = delete;
  ~GemmBenchBuffers() {
    for (void* p : {static_cast<void*>(x), static_cast<void*>(y), xq, xb, wb, wfull}) CK(cudaFree(p));
  }
};

// The int4 / int8 tensor-core GEMM (qgemm.cuh) at 9-64 rows against what the backend ran there
// before it, in the same run: the weights dequantized to BF16 64 MiB at a time, each slab a
// BF16 cuBLASLt GEMM (matmul_packed_large), plus BF16 cuBLASLt on weights already in BF16 (4x
// the bytes: what bf16 weights cost). GB/s of packed bytes (weights + scales); the GEMV at 8
// rows as the reference point below the range.
void bench_qgemm(cudaStream_t s, double copy_gbs, LtGemm& lt, int sms) {
  struct Shape { int64_t m, k; const char* what; };
  const Shape shapes[] = {{4096, 4096, "q/o proj"}, {1024, 4096, "k/v proj"}, {14336, 4096, "gate/up"},
                          {4096, 14336, "down"}, {128256, 4096, "lm_head"}};
  constexpr int kMaxN = kQGemmMaxBatch;
  void* ws = dmalloc(32u << 20);
  for (QFormat f : {QFormat::Int4, QFormat::Int8}) {
    const std::string fname = f == QFormat::Int4 ? "int4" : "int8";
    for (const auto& sh : shapes) {
      const PackedGemvData data(f, sh.m, sh.k, 2, s);
      const int copies = data.copies();
      const int per_graph = std::max(copies * 2, 8);
      // (one BF16 copy of the weights: the k/v shape's 8 MiB fits L2)
      const GemmBenchBuffers b(f, data.w[0], sh.m, sh.k, kMaxN, qgemm_x_bytes(f, kMaxN, sh.k), s);
      float *x = b.x, *y = b.y;
      void *xq = b.xq, *xb = b.xb, *wb = b.wb, *wfull = b.wfull;
      const int64_t slab = b.slab;
      const std::string shape = std::to_string(sh.m) + "x" + std::to_string(sh.k) + " " + sh.what;
      auto report = [&](const std::string& name, double ms, int n) {
        const double gbs = data.qbytes / (ms * 1e-3) / 1e9;
        char note[128];
        std::snprintf(note, sizeof note, "%.1f us, %.0f%% of copy, %.1f TFLOP/s", ms * 1e3, 100.0 * gbs / copy_gbs,
                      2.0 * n * sh.m * sh.k / (ms * 1e-3) / 1e12);
        result("qgemm", name + " n=" + std::to_string(n) + " " + shape, gbs, "GB/s", note);
      };
      for (int n : {4, 8}) {  // the GEMV's range: the GEMV, and the GEMM beside it
        const double ms = time_graph(s, per_graph, 7, [&](int i) { data.launch(i, f, sh.m, sh.k, n, false, QGemvPath::Auto, s); });
        report("ember " + fname + " GEMV", ms, n);
      }
      for (int n : {4, 8, 9, 16, 24, 32, 48, 64}) {
        const QGemmPlan plan = plan_qgemm(f, n, sh.m, sh.k, sms);
        const double ms = time_graph(s, per_graph, 7, [&](int i) {
          CK(launch_qgemm(f, data.w[i % copies], sh.m, sh.k, x, n, nullptr, y, false, plan, xq, /*pdl=*/true, s));
        });
        report("ember " + fname + " GEMM (" + std::to_string(plan.splits) + " k slices)", ms, n);
        if (n != 16 && n != 32 && n != 64) continue;
        // Other cuts beside the planner's (k slices; at 16 rows the BF16 q * scale fragments
        // beside the default offset sums), at 16 and 32 rows.
        for (int splits : {1, 2, 4, 8, 16}) {
          for (int phase : {2}) {
            for (bool offset : {true, false}) {
              if (n == 64 || (!offset && n != 16) || f != QFormat::Int4) continue;
              const int units = static_cast<int>(qweight_k_pad(f, sh.k) / qformat_unit(f));
              if (splits > units) continue;
              QGemmPlan alt;
              alt.units = (units + splits - 1) / splits;
              alt.splits = (units + alt.units - 1) / alt.units;
              alt.phase = phase;
              alt.offset_sums = offset;
              if (alt.splits != splits) continue;
              const double ms_alt = time_graph(s, per_graph, 5, [&](int i) {
                CK(launch_qgemm(f, data.w[i % copies], sh.m, sh.k, x, n, nullptr, y, false, alt, xq, /*pdl=*/true, s));
              });
              report("ember " + fname + " GEMM cut " + std::to_string(splits) + " slices, phase " + std::to_string(phase) +
                         (qgemm_exact_weights(f, alt, n) ? ", offset sums" : ", bf16 q*s"),
                     ms_alt, n);
            }
          }
        }
        const double ms_deq = time_graph(s, 4, 5, [&](int i) {
          dequant_lt_gemm(lt, f, data.w[i % copies], x, xb, wb, slab, y, n, sh.m, sh.k, ws, s);
        });
        report("dequantize + cublasLt bf16 (before)", ms_deq, n);
        const double ms_bf16 = time_graph(s, 4, 5, [&](int) {
          const Status st = lt.matmul(DType::BF16, xb, wfull, y, n, sh.m, sh.k, ws, 32u << 20, s);
          if (!st.is_ok()) std::exit(1);
        });
        report("cublasLt bf16 weights (4x bytes)", ms_bf16, n);
      }
    }
  }
  CK(cudaFree(ws));
}

// The int4 / int8 wgmma GEMM (qgemm_wg.cuh) from 64 rows up against what the backend ran there
// before it, in the same run: the weights dequantized to BF16 64 MiB at a time, each slab a BF16
// cuBLASLt GEMM (matmul_packed_large), plus BF16 cuBLASLt on weights already in BF16 (what bf16
// weights cost) and, at 64 rows, the mma.sync GEMM (qgemm.cuh). TFLOP/s; the planner's k
// slices, and at 128 / 256 rows every other slice count beside them.
void bench_qgemm_wg(cudaStream_t s, LtGemm& lt, int sms) {
  struct Shape { int64_t m, k; const char* what; };
  const Shape shapes[] = {{6144, 4096, "qkv"}, {1024, 4096, "k/v proj"}, {4096, 4096, "o proj"},
                          {14336, 4096, "gate/up"}, {4096, 14336, "down"}};
  const int ns[] = {64, 128, 192, 256, 384, 512, 1024, 4096};
  constexpr int kMaxN = 4096;
  void* ws = dmalloc(32u << 20);
  for (QFormat f : {QFormat::Int4, QFormat::Int8}) {
    const std::string fname = f == QFormat::Int4 ? "int4" : "int8";
    for (const auto& sh : shapes) {
      const PackedGemvData data(f, sh.m, sh.k, 2, s);
      const int copies = data.copies();
      const GemmBenchBuffers b(f, data.w[0], sh.m, sh.k, kMaxN,
                               std::max(qgemm_wg_x_bytes(f, kMaxN, sh.k), qgemm_x_bytes(f, 64, sh.k)), s);
      float *x = b.x, *y = b.y;
      void *xq = b.xq, *xb = b.xb, *wb = b.wb, *wfull = b.wfull;
      const int64_t slab = b.slab;
      const std::string shape = std::to_string(sh.m) + "x" + std::to_string(sh.k) + " " + sh.what;
      for (int n : ns) {
        const int per_graph = n >= 1024 ? 4 : std::max(copies * 2, 8);
        const int reps = n >= 1024 ? 3 : 5;
        auto report = [&](const std::string& name, double ms) {
          const double tf = 2.0 * n * sh.m * sh.k / (ms * 1e-3) / 1e12;
          char note[96];
          std::snprintf(note, sizeof note, "%.1f us", ms * 1e3);
          result("qgemm-wg", name + " n=" + std::to_string(n) + " " + shape, tf, "TFLOP/s", note);
        };
        const QGemmWgPlan plan = plan_qgemm_wg(f, n, sh.m, sh.k, sms);
        report("ember " + fname + " wgmma GEMM (" + std::to_string(plan.splits) + " k slices)",
               time_graph(s, per_graph, reps, [&](int i) {
                 CK(launch_qgemm_wg(f, data.w[i % copies], sh.m, sh.k, x, n, nullptr, y, false, plan, xq, true, s));
               }));
        if (n == 128 || n == 256 || n == 512) {
          const int units = static_cast<int>(qweight_k_pad(f, sh.k) / qformat_unit(f));
          for (int splits : {1, 2, 4, 8}) {
            QGemmWgPlan alt;
            alt.units = (units + splits - 1) / splits;
            alt.splits = (units + alt.units - 1) / alt.units;
            if (alt.splits == plan.splits || alt.splits != splits) continue;
            report("ember " + fname + " wgmma GEMM cut " + std::to_string(splits) + " slices",
                   time_graph(s, per_graph, reps, [&](int i) {
                     CK(launch_qgemm_wg(f, data.w[i % copies], sh.m, sh.k, x, n, nullptr, y, false, alt, xq, true, s));
                   }));
          }
        }
        if (n == 64) {
          const QGemmPlan qp = plan_qgemm(f, n, sh.m, sh.k, sms);
          report("ember " + fname + " mma.sync GEMM", time_graph(s, per_graph, reps, [&](int i) {
                   CK(launch_qgemm(f, data.w[i % copies], sh.m, sh.k, x, n, nullptr, y, false, qp, xq, true, s));
                 }));
        }
        report("dequantize + cublasLt bf16 (before)", time_graph(s, per_graph, reps, [&](int i) {
                 dequant_lt_gemm(lt, f, data.w[i % copies], x, xb, wb, slab, y, n, sh.m, sh.k, ws, s);
               }));
        report("cublasLt bf16 weights", time_graph(s, per_graph, reps, [&](int) {
                 const Status st = lt.matmul(DType::BF16, xb, wfull, y, n, sh.m, sh.k, ws, 32u << 20, s);
                 if (!st.is_ok()) std::exit(1);
               }));
      }
    }
  }
  CK(cudaFree(ws));
}

// Packed int4 / fp8 / int8 GEMV (tensor cores, dequantized in registers) at batch 1, 3, 4 and 8,
// and the gate/up + GLU launch at 1 and 8; GB/s of packed bytes (weights + scales) read. Then the
// FP8 cuBLASLt GEMM (x quantized per row + scale epilogue) against BF16 cuBLASLt for a batch of 256.
void bench_qgemv(cudaStream_t s, double copy_gbs, LtGemm& lt) {
  struct Shape { int64_t m, k; const char* what; };
  const Shape shapes[] = {{4096, 4096, "q/o proj"}, {6144, 4096, "qkv"}, {14336, 4096, "gate/up"},
                          {4096, 14336, "down"}, {128256, 4096, "lm_head"}};
  void* ws = dmalloc(32u << 20);
  for (QFormat f : {QFormat::Int4, QFormat::Fp8, QFormat::Int8}) {
    const char* fname = f == QFormat::Int4 ? "int4" : f == QFormat::Int8 ? "int8" : "fp8";
    for (const auto& sh : shapes) {
      const PackedGemvData data(f, sh.m, sh.k, 2, s);
      const size_t qbytes = data.qbytes;
      const auto& w = data.w;
      const int copies = data.copies();
      const std::string shape = std::to_string(sh.m) + "x" + std::to_string(sh.k) + " " + sh.what;
      const int per_graph = std::max(copies * 4, 16);
      // Auto (the backend's pick: staged when x fits) at n = 1, 3, 4, 8; the direct kernel beside it.
      for (QGemvPath path : {QGemvPath::Auto, QGemvPath::Direct}) {
        const char* pname = path == QGemvPath::Auto ? "" : " direct";
        for (int n : {1, 3, 4, 8}) {
          if (path == QGemvPath::Direct && n == 4) continue;
          const double ms =
              time_graph(s, per_graph, 9, [&](int i) { data.launch(i, f, sh.m, sh.k, n, false, path, s); });
          const double gbs = qbytes / (ms * 1e-3) / 1e9;
          char note[96];
          std::snprintf(note, sizeof note, "%.1f us, %.0f%% of copy, %.1f MB", ms * 1e3, 100.0 * gbs / copy_gbs, qbytes / 1e6);
          result("qgemv", std::string("ember ") + fname + pname + " n=" + std::to_string(n) + " " + shape, gbs, "GB/s", note);
        }
        for (int n : {1, 8}) {
          if (sh.m != 14336) break;  // gate and up (two copies of the matrix) with the GLU epilogue
          const double ms =
              time_graph(s, per_graph, 9, [&](int i) { data.launch(i, f, sh.m, sh.k, n, true, path, s); });
          const double gbs = 2.0 * qbytes / (ms * 1e-3) / 1e9;
          char note[96];
          std::snprintf(note, sizeof note, "%.1f us, %.0f%% of copy", ms * 1e3, 100.0 * gbs / copy_gbs);
          result("qgemv", std::string("ember ") + fname + pname + " gate/up+GLU n=" + std::to_string(n) + " 2x" + shape,
                 gbs, "GB/s", note);
        }
      }
      if (f == QFormat::Fp8 && sh.m == 14336) {
        const int64_t n = 256, k_pad = qweight_k_pad(f, sh.k);
        void* xq = dmalloc(static_cast<size_t>(n * k_pad) + 4096);
        auto* xs = reinterpret_cast<float*>(static_cast<uint8_t*>(xq) + n * k_pad);
        auto* xn = static_cast<float*>(dmalloc(static_cast<size_t>(n * sh.k) * 4));
        auto* yn = static_cast<float*>(dmalloc(static_cast<size_t>(n * sh.m) * 4));
        CK(launch_fill_random(DType::F32, xn, n * sh.k, 4, -1.0f, 1.0f, s));
        const auto* wsc = [&](void* p) {
          return reinterpret_cast<const float*>(static_cast<uint8_t*>(p) + qweight_scales_offset(f, sh.m, sh.k));
        }(w[0]);
        bool ok = true;
        const double ms = time_graph(s, per_graph, 9, [&](int i) {
          CK(launch_quantize_rows_fp8(xn, n, sh.k, k_pad, xq, xs, s));
          ok = ok && lt.matmul(DType::FP8_E4M3, xq, w[i % copies], yn, n, sh.m, k_pad, ws, 32u << 20, s).is_ok();
          CK(launch_scale_rows_cols(yn, n, sh.m, sh.m, xs, wsc, nullptr, s));
        });
        const double tf = 2.0 * n * sh.m * sh.k / (ms * 1e-3) / 1e12;
        result("qgemm", "fp8 cuBLASLt + x quant + scales n=256 " + shape, ok ? tf : 0.0, "TFLOP/s",
               ok ? std::to_string(ms * 1e3) + " us" : "cuBLASLt FP8 failed");
        void* wb = dmalloc(static_cast<size_t>(sh.m * sh.k) * 2);
        void* xb = dmalloc(static_cast<size_t>(n * sh.k) * 2);
        CK(launch_convert(DType::F32, xn, DType::BF16, xb, n * sh.k, s));
        const double msb = time_graph(s, 8, 9, [&](int) {
          CK(lt.matmul(DType::BF16, xb, wb, yn, n, sh.m, sh.k, ws, 32u << 20, s).is_ok() ? cudaSuccess : cudaErrorUnknown);
        });
        result("qgemm", "bf16 cuBLASLt n=256 " + shape, 2.0 * n * sh.m * sh.k / (msb * 1e-3) / 1e12, "TFLOP/s",
               std::to_string(msb * 1e3) + " us");
        for (void* p : {xq, static_cast<void*>(xn), static_cast<void*>(yn), wb, xb}) CK(cudaFree(p));
      }
    }
  }
  CK(cudaFree(ws));
}

// Random values in [-1, 1) through the cache's own store (unit-scale fp8 bytes, as
// --kv-dtype fp8_* writes them).   cache [n_slots, row] of `type` (FP8_E4M3 / FP8_E5M2).
void fill_fp8_cache(void* cache, DType type, int64_t n_slots, int64_t row, uint64_t seed,
                    cudaStream_t s) {
  const int64_t chunk = std::max<int64_t>(1, (int64_t{64} << 20) / (row * 4));  // 64 MiB of F32
  auto* src = static_cast<float*>(dmalloc(static_cast<size_t>(chunk * row) * 4));
  auto* slots = static_cast<int32_t*>(dmalloc(static_cast<size_t>(chunk) * 4));
  std::vector<int32_t> h(static_cast<size_t>(chunk));
  for (int64_t s0 = 0; s0 < n_slots; s0 += chunk) {
    const int64_t n = std::min(chunk, n_slots - s0);
    std::iota(h.begin(), h.begin() + n, static_cast<int32_t>(s0));
    CK(cudaMemcpyAsync(slots, h.data(), static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice, s));
    CK(launch_fill_random(DType::F32, src, n * row, seed + static_cast<uint64_t>(s0), -1.0f, 1.0f, s));
    CK(launch_kv_store(src, slots, static_cast<int>(n), row, cache, type, s));
    CK(cudaStreamSynchronize(s));  // h is rewritten next chunk
  }
  CK(cudaFree(src));
  CK(cudaFree(slots));
}

// Paged K/V (BF16 or FP8) for n_seqs sequences of seq_len tokens (or lens[i], each <=
// seq_len, which stays the planning bound as under a decode graph), blocks shuffled across the
// pool.
struct PagedSetup {
  void* k = nullptr;
  void* v = nullptr;
  float* scales = nullptr;  // I8: K then V per-(slot, head) scales
  int32_t* meta = nullptr;  // query_start | seq_lens | block_tables | seq_ids
  int n_seqs = 0, max_blocks = 0;
  DType kv_type = DType::BF16;
  size_t kv_bytes = 0;    // of K (V the same)
  size_t read_bytes = 0;  // of K one decode step reads (the sequences' keys)
  PagedSetup(int n_seqs_, int seq_len, int n_new, int n_kv, int d, int bs, cudaStream_t s,
             DType kv_type_ = DType::BF16, const std::vector<int>& lens = {})
      : n_seqs(n_seqs_), kv_type(kv_type_) {
    max_blocks = (seq_len + bs - 1) / bs;
    const int n_blocks = n_seqs * max_blocks;
    const int64_t elems = int64_t{n_blocks} * bs * n_kv * d;
    const bool i8 = kv_type == DType::I8;
    const bool fp8 = kv_type == DType::FP8_E4M3 || kv_type == DType::FP8_E5M2 || i8;
    // (INT8: a key's K row also reads its 4-byte scale)
    const size_t row_bytes = static_cast<size_t>(d) * (fp8 ? 1 : 2) + (i8 ? 4 : 0);
    kv_bytes = static_cast<size_t>(n_blocks) * bs * n_kv * row_bytes;
    read_bytes = kv_bytes;
    if (!lens.empty()) {
      read_bytes = 0;
      for (int len : lens) read_bytes += static_cast<size_t>(len) * n_kv * row_bytes;
    }
    k = dmalloc(kv_bytes);
    v = dmalloc(kv_bytes);
    if (i8) {  // random bytes as the int8 values, scales as of rows of absmax ~1
      fill_fp8_cache(k, DType::FP8_E4M3, int64_t{n_blocks} * bs, int64_t{n_kv} * d, 21, s);
      fill_fp8_cache(v, DType::FP8_E4M3, int64_t{n_blocks} * bs, int64_t{n_kv} * d, 22, s);
      scales = static_cast<float*>(dmalloc(static_cast<size_t>(n_blocks) * bs * n_kv * 8));
      CK(launch_fill_random(DType::F32, scales, int64_t{n_blocks} * bs * n_kv * 2, 23, 0.004f, 0.012f, s));
    } else if (fp8) {
      fill_fp8_cache(k, kv_type, int64_t{n_blocks} * bs, int64_t{n_kv} * d, 21, s);
      fill_fp8_cache(v, kv_type, int64_t{n_blocks} * bs, int64_t{n_kv} * d, 22, s);
    } else {
      CK(launch_fill_random(DType::BF16, k, elems, 21, -1.0f, 1.0f, s));
      CK(launch_fill_random(DType::BF16, v, elems, 22, -1.0f, 1.0f, s));
    }
    std::vector<int32_t> perm(n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(5);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> h;
    for (int i = 0; i <= n_seqs; ++i) h.push_back(i * n_new);
    for (int i = 0; i < n_seqs; ++i) h.push_back(lens.empty() ? seq_len : lens[static_cast<size_t>(i)]);
    h.insert(h.end(), perm.begin(), perm.end());
    for (int i = 0; i < n_seqs; ++i) h.push_back(i);
    meta = static_cast<int32_t*>(dmalloc(h.size() * 4));
    CK(cudaMemcpy(meta, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  ~PagedSetup() {
    cudaFree(k);
    cudaFree(v);
    cudaFree(scales);
    cudaFree(meta);
  }
  PagedAttnArgs args(const float* q, float* out, int n_new, int seq_len, int n_heads, int n_kv,
                     int d, int bs) const {
    PagedAttnArgs a;
    a.q = q;
    a.out = out;
    a.k = k;
    a.v = v;
    a.kv_type = kv_type;
    if (scales) {
      a.k_scales = scales;
      a.v_scales = scales + static_cast<size_t>(n_seqs) * max_blocks * bs * n_kv;
    }
    a.query_start = meta;
    a.seq_lens = meta + n_seqs + 1;
    a.block_tables = meta + 2 * n_seqs + 1;
    a.seq_ids = a.block_tables + static_cast<size_t>(n_seqs) * max_blocks;
    a.n_launch_seqs = n_seqs;
    a.max_blocks_per_seq = max_blocks;
    a.block_size = bs;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv;
    a.head_dim = d;
    a.scale = 1.0f / std::sqrt(static_cast<float>(d));
    a.max_new = n_new;
    a.max_kv = seq_len;
    return a;
  }
};

// One decode-attention configuration (0: the default) of one cache dtype and shape.
struct DecodeCfg {
  int splits, stages;
  bool keys_as_m = true;  // one-byte K/V: false = the 16-row kernel
};

// The decode kernel's tuning sweep per (cache dtype, batch): the default first. BF16 keeps
// the configurations measured before; FP8 e4m3 and INT8 (the same one-byte kernel) try its
// stage counts (a count the kernel does not build is reported as skipped).
std::vector<DecodeCfg> decode_configs(DType kv, int batch) {
  if (kv == DType::BF16) {
    if (batch == 32) return {{0, 0}, {0, 3}, {2, 2}, {4, 2}, {6, 2}, {2, 3}};
    if (batch == 64) return {{0, 0}, {0, 3}, {1, 2}, {1, 3}, {3, 2}};
    return {{0, 0}, {0, 2}};
  }
  if (kv == DType::FP8_E5M2) return {{0, 0}};
  // The 16-row kernel's default beside the keys-as-M kernel's (same call A/B).
  std::vector<DecodeCfg> c = {{0, 0}, {0, 0, false}, {0, 2}, {0, 3}, {0, 4}, {0, 6}};
  if (batch == 32) c.insert(c.end(), {{2, 0}, {3, 0}, {4, 0}});
  if (batch == 64) c.insert(c.end(), {{1, 0}, {2, 0}, {3, 0}});
  return c;
}

// Sequence lengths lo..hi (deterministic) for the mixed-length shape.
std::vector<int> mixed_lens(int n, int lo, int hi) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> len(lo, hi);
  std::vector<int> lens(static_cast<size_t>(n));
  for (int& x : lens) x = len(rng);
  return lens;
}

// Times kind on a (its workspace allocated here) and reports the K/V bytes read per second.
void report_decode(cudaStream_t s, int sms, double copy_gbs, size_t read_bytes, const PagedAttnArgs& a,
                   AttnKernel kind, const std::string& name) {
  const size_t ws_bytes = attention_workspace_bytes(a, kind, sms);
  void* ws = ws_bytes ? dmalloc(ws_bytes) : nullptr;
  const double ms = time_graph(s, 10, 9, [&](int) { CK(launch_paged_attention(a, kind, ws, ws_bytes, sms, s)); });
  if (ws) CK(cudaFree(ws));
  const double gbs = 2.0 * read_bytes / (ms * 1e-3) / 1e9;
  char note[96];
  std::snprintf(note, sizeof note, "%.1f us, %.0f%% of copy", ms * 1e3, 100.0 * gbs / copy_gbs);
  result("decode-attn", name, gbs, "GB/s", note);
}

void bench_decode_attention(cudaStream_t s, double copy_gbs, int sms) {
  const int H = 32, KV = 8, D = 128, bs = 16;
  // seq_len: every sequence's length, or (mixed) the bound over lengths 1000..2000: a decode
  // step of 252 sequences under a graph (width bucket 2048), the shape measured in the engine.
  struct Shape { int batch, seq_len; bool mixed; };
  for (const Shape sh : {Shape{32, 4096, false}, Shape{64, 4096, false}, Shape{256, 1024, false},
                         Shape{252, 2048, true}}) {
    const int batch = sh.batch, seq_len = sh.seq_len;
    const std::vector<int> lens = sh.mixed ? mixed_lens(batch, 1000, 2000) : std::vector<int>{};
    auto* q = static_cast<float*>(dmalloc(static_cast<size_t>(batch) * H * D * 4));
    auto* out = static_cast<float*>(dmalloc(static_cast<size_t>(batch) * H * D * 4));
    CK(launch_fill_random(DType::F32, q, int64_t{batch} * H * D, 7, -2.0f, 2.0f, s));
    for (DType kv : {DType::BF16, DType::FP8_E4M3, DType::FP8_E5M2, DType::I8}) {
      PagedSetup ps(batch, seq_len, 1, KV, D, bs, s, kv, lens);
      for (const auto& cfg : decode_configs(kv, batch)) {
        PagedAttnArgs a = ps.args(q, out, 1, seq_len, H, KV, D, bs);
        a.splits = cfg.splits;
        a.stages = cfg.stages;
        a.decode_keys_as_m = cfg.keys_as_m;
        const std::string name = "ember paged " + std::string(dtype_name(kv)) + " b" +
                                 std::to_string(batch) + (sh.mixed ? " s1000-2000/" : " s") +
                                 std::to_string(seq_len) +
                                 " h32/kv8 d128 splits=" +
                                 (cfg.splits ? std::to_string(cfg.splits) : std::string("auto")) +
                                 " stages=" +
                                 (cfg.stages ? std::to_string(cfg.stages) : std::string("default")) +
                                 (cfg.keys_as_m ? "" : " 16-row kernel");
        const size_t ws_bytes = attention_workspace_bytes(a, AttnKernel::Decode, sms);
        void* ws = ws_bytes ? dmalloc(ws_bytes) : nullptr;
        // A configuration this build does not instantiate fails its launch up front.
        const cudaError_t probe = launch_paged_attention(a, AttnKernel::Decode, ws, ws_bytes, sms, s);
        if (probe != cudaSuccess) (void)cudaGetLastError();
        CK(cudaStreamSynchronize(s));
        if (ws) CK(cudaFree(ws));
        if (probe != cudaSuccess) {
          std::printf("SKIP|decode-attn|%s|not built\n", name.c_str());
          continue;
        }
        report_decode(s, sms, copy_gbs, ps.read_bytes, a, AttnKernel::Decode, name);
      }
      if (sh.mixed && (kv == DType::FP8_E4M3 || kv == DType::BF16)) {
        // The launch's sequences longest first (blocks start in grid order: a long sequence
        // started last leaves a tail of idle SMs).
        std::vector<int32_t> order(static_cast<size_t>(batch));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return lens[x] > lens[y]; });
        auto* ids = static_cast<int32_t*>(dmalloc(order.size() * 4));
        CK(cudaMemcpy(ids, order.data(), order.size() * 4, cudaMemcpyHostToDevice));
        PagedAttnArgs a = ps.args(q, out, 1, seq_len, H, KV, D, bs);
        a.seq_ids = ids;
        report_decode(s, sms, copy_gbs, ps.read_bytes, a, AttnKernel::Decode,
                      "ember paged " + std::string(dtype_name(kv)) + " b" + std::to_string(batch) +
                          " s1000-2000/2048 h32/kv8 d128 splits=auto stages=default longest first");
        CK(cudaFree(ids));
      }
      if (kv == DType::I8) {  // the fallback kernel, INT8's only one before session 10
        report_decode(s, sms, copy_gbs, ps.read_bytes, ps.args(q, out, 1, seq_len, H, KV, D, bs), AttnKernel::Simple,
                      "ember paged i8 b" + std::to_string(batch) + " fallback (simple) kernel");
      }
    }
    CK(cudaFree(q));
    CK(cudaFree(out));
  }
  // head_dim 256 (Gemma 3 4B: 8 heads, 4 KV heads): decode rows on the wgmma kernel (Auto's
  // pick, mode 3; mode 0 beside it), split over the key range where the blocks are few (and,
  // "unsplit", one block per K/V head walking all its keys).
  if (wgmma_prefill_available(0)) {
    const int H2 = 8, KV2 = 4, D2 = 256;
    for (const Shape sh : {Shape{1, 4096, false}, Shape{32, 4096, false}}) {
      auto* q = static_cast<float*>(dmalloc(static_cast<size_t>(sh.batch) * H2 * D2 * 4));
      auto* out = static_cast<float*>(dmalloc(static_cast<size_t>(sh.batch) * H2 * D2 * 4));
      CK(launch_fill_random(DType::F32, q, int64_t{sh.batch} * H2 * D2, 7, -2.0f, 2.0f, s));
      const PagedSetup ps(sh.batch, sh.seq_len, 1, KV2, D2, bs, s);
      struct Cfg { int mode, splits; };
      for (const Cfg cfg : {Cfg{3, 0}, Cfg{3, 1}, Cfg{3, 8}, Cfg{3, 32}, Cfg{3, 64}, Cfg{0, 0}, Cfg{0, 1}}) {
        PagedAttnArgs a = ps.args(q, out, 1, sh.seq_len, H2, KV2, D2, bs);
        a.wgmma = true;
        a.prefill_mode = cfg.mode;
        a.splits = cfg.splits;
        report_decode(s, sms, copy_gbs, ps.read_bytes, a, AttnKernel::PrefillWgmma,
                      "ember paged bf16 b" + std::to_string(sh.batch) + " s" + std::to_string(sh.seq_len) +
                          " h8/kv4 d256 wgmma mode " + std::to_string(cfg.mode) +
                          (cfg.splits == 1 ? std::string(" unsplit")
                           : cfg.splits    ? " splits=" + std::to_string(cfg.splits)
                                           : std::string(" splits=auto")) +
                          (cfg.mode == 3 && cfg.splits == 0 ? " (default)" : ""));
      }
      CK(cudaFree(q));
      CK(cudaFree(out));
    }
  }
}

// One launch of kind on a prepared causal prefill of one whole prompt (a.max_new tokens),
// reported in TFLOP/s.
void report_prefill(cudaStream_t s, int sms, const PagedAttnArgs& a, AttnKernel kind, const std::string& name) {
  const double ms = time_graph(s, 5, 9, [&](int) { CK(launch_paged_attention(a, kind, nullptr, 0, sms, s)); });
  // Causal: each of the n queries sees pos + 1 keys; 2 matmuls of 2 FLOP per MAC.
  const double n = a.max_new;
  const double flop = 4.0 * a.head_dim * a.n_heads * (n * (n + 1) / 2);
  char note[64];
  std::snprintf(note, sizeof note, "%.3f ms", ms);
  result("prefill-attn", name, flop / (ms * 1e-3) / 1e12, "TFLOP/s", note);
}

void bench_prefill_attention(cudaStream_t s, int sms) {
  const int n = 4096, H = 32, D = 128, bs = 16;
  const bool wgmma = wgmma_prefill_available(0);
  // The mma.sync kernel (default 8 warps, and 4), then the wgmma kernels where the device runs
  // them; one-byte K/V (8 KV heads only): the mma.sync kernel widens in shared memory, the
  // wgmma ones in their producer (FP8 e4m3 exactly; INT8 times its scales, 64-key tiles only).
  struct Variant {
    DType kv;
    AttnKernel kind;
    int warps, stages, keys, mode;
    const char* name;
  };
  const DType bf = DType::BF16, e4 = DType::FP8_E4M3, i8 = DType::I8;
  const AttnKernel mma = AttnKernel::Prefill, wg = AttnKernel::PrefillWgmma;
  const Variant variants[] = {
      {bf, mma, 0, 0, 0, 0, "mma.sync 8w"},
      {bf, mma, 4, 2, 0, 0, "mma.sync 4w"},
      {bf, wg, 0, 0, 128, 0, "wgmma synced 128-key tiles"},
      {bf, wg, 0, 0, 128, 1, "wgmma warp-specialized 128-key tiles"},
      {bf, wg, 0, 0, 128, 3, "wgmma warp-specialized softmax over P V 128-key tiles"},
      {bf, wg, 0, 0, 64, 0, "wgmma synced 64-key tiles"},
      {bf, wg, 0, 0, 64, 1, "wgmma warp-specialized 64-key tiles"},
      {bf, wg, 0, 0, 64, 2, "wgmma warp-specialized 3 consumers 64-key tiles"},
      {bf, wg, 0, 0, 64, 3, "wgmma warp-specialized softmax over P V 64-key tiles"},
      {bf, wg, 0, 0, 64, 4, "wgmma warp-specialized softmax over P V, 3 consumers 64-key tiles (default)"},
      {e4, mma, 0, 0, 0, 0, "mma.sync 8w"},
      {e4, wg, 0, 0, 128, 1, "wgmma warp-specialized 128-key tiles"},
      {e4, wg, 0, 0, 128, 3, "wgmma warp-specialized softmax over P V 128-key tiles"},
      {e4, wg, 0, 0, 64, 1, "wgmma warp-specialized 64-key tiles"},
      {e4, wg, 0, 0, 64, 3, "wgmma warp-specialized softmax over P V 64-key tiles"},
      {e4, wg, 0, 0, 64, 4, "wgmma warp-specialized softmax over P V, 3 consumers 64-key tiles (default)"},
      {i8, mma, 0, 0, 0, 0, "mma.sync 8w"},
      {i8, wg, 0, 0, 64, 1, "wgmma warp-specialized 64-key tiles"},
      {i8, wg, 0, 0, 64, 4, "wgmma warp-specialized softmax over P V, 3 consumers 64-key tiles (default)"}};
  for (int KV : {8, 32}) {
    auto* q = static_cast<float*>(dmalloc(static_cast<size_t>(n) * H * D * 4));
    auto* out = static_cast<float*>(dmalloc(static_cast<size_t>(n) * H * D * 4));
    CK(launch_fill_random(DType::F32, q, int64_t{n} * H * D, 8, -2.0f, 2.0f, s));
    for (DType kv : {bf, e4, i8}) {
      if (kv != bf && KV != 8) continue;
      const PagedSetup ps(1, n, n, KV, D, bs, s, kv);
      for (const Variant& v : variants) {
        if (v.kv != kv || (v.kind == wg && !wgmma)) continue;
        PagedAttnArgs a = ps.args(q, out, n, n, H, KV, D, bs);
        a.prefill_warps = v.warps;
        a.stages = v.stages;
        a.prefill_keys = v.keys;
        a.prefill_mode = v.mode;
        a.wgmma = wgmma;
        report_prefill(s, sms, a, v.kind,
                       "ember paged " + std::string(dtype_name(kv)) + " causal 4096 h32/kv" + std::to_string(KV) +
                           " d128 " + v.name);
      }
    }
    CK(cudaFree(q));
    CK(cudaFree(out));
  }
  // head_dim 256 (Gemma 3 4B: 8 heads, 4 KV heads): the block-synced kernel and the two
  // overlapping consumers (K and V on their own barriers), both on 64-key tiles, 2 stages.
  if (wgmma) {
    const int H256 = 8, KV256 = 4, D256 = 256;
    const PagedSetup ps(1, n, n, KV256, D256, bs, s);
    auto* q = static_cast<float*>(dmalloc(static_cast<size_t>(n) * H256 * D256 * 4));
    auto* out = static_cast<float*>(dmalloc(static_cast<size_t>(n) * H256 * D256 * 4));
    CK(launch_fill_random(DType::F32, q, int64_t{n} * H256 * D256, 9, -2.0f, 2.0f, s));
    PagedAttnArgs a = ps.args(q, out, n, n, H256, KV256, D256, bs);
    a.wgmma = true;
    a.prefill_mode = 0;
    report_prefill(s, sms, a, wg, "ember paged bf16 causal 4096 h8/kv4 d256 wgmma synced 64-key tiles");
    a.prefill_mode = 3;
    report_prefill(s, sms, a, wg, "ember paged bf16 causal 4096 h8/kv4 d256 wgmma overlap 2 consumers split K/V");
    // One-byte K/V: the overlapping kernel whose producer widens one raw tile at a time, beside
    // the simple kernel these caches took at head_dim 256 before it.
    for (DType kv : {e4, i8}) {
      const PagedSetup pk(1, n, n, KV256, D256, bs, s, kv);
      PagedAttnArgs b = pk.args(q, out, n, n, H256, KV256, D256, bs);
      b.wgmma = true;
      b.prefill_mode = 3;
      const std::string what = "ember paged " + std::string(dtype_name(kv)) + " causal 4096 h8/kv4 d256 ";
      report_prefill(s, sms, b, wg, what + "wgmma overlap, producer widens one raw tile");
      report_prefill(s, sms, b, AttnKernel::Simple, what + "simple kernel (before)");
    }
    CK(cudaFree(q));
    CK(cudaFree(out));
  }
}

void bench_gemm(cudaStream_t s, LtGemm& lt) {
  // The prefill matmul ceiling: cuBLASLt bf16, 4096 tokens x Llama-3-8B gate/up shape.
  const int64_t n = 4096, m = 14336, k = 4096;
  void* x = dmalloc(static_cast<size_t>(n * k) * 2);
  void* w = dmalloc(static_cast<size_t>(m * k) * 2);
  auto* y = static_cast<float*>(dmalloc(static_cast<size_t>(n * m) * 4));
  void* ws = dmalloc(32u << 20);
  CK(launch_fill_random(DType::BF16, x, n * k, 31, -1.0f, 1.0f, s));
  CK(launch_fill_random(DType::BF16, w, m * k, 32, -0.05f, 0.05f, s));
  const double ms = time_graph(s, 5, 7, [&](int) {
    const Status st = lt.matmul(DType::BF16, x, w, y, n, m, k, ws, 32u << 20, s);
    if (!st.is_ok()) std::exit(1);
  });
  result("ceiling", "cublasLt bf16 gemm 4096x14336x4096 (f32 out)", 2.0 * n * m * k / (ms * 1e-3) / 1e12,
         "TFLOP/s");
  for (void* p : {x, w, static_cast<void*>(y), ws}) CK(cudaFree(p));
}

// The causal prefill the profiling entries launch: 4096 tokens, bf16 K/V, 32 heads / 8 KV
// heads of 128.
struct ProfilePrefill {
  static constexpr int n = 4096, H = 32, KV = 8, D = 128;
  PagedSetup ps;
  float* q;
  float* out;
  PagedAttnArgs a;
  explicit ProfilePrefill(cudaStream_t s)
      : ps(1, n, n, KV, D, 16, s),
        q(static_cast<float*>(dmalloc(size_t{n} * H * D * 4))),
        out(static_cast<float*>(dmalloc(size_t{n} * H * D * 4))) {
    CK(launch_fill_random(DType::F32, q, int64_t{n} * H * D, 8, -2.0f, 2.0f, s));
    a = ps.args(q, out, n, n, H, KV, D, 16);
  }
  ~ProfilePrefill() {
    CK(cudaFree(q));
    CK(cudaFree(out));
  }
  ProfilePrefill(const ProfilePrefill&) = delete;
  ProfilePrefill& operator=(const ProfilePrefill&) = delete;
};

// One launch of each default kernel (decode b32, prefill 4096, GEMV 14336x4096), in that
// order, for `ncu -c 3`.
void profile_once(cudaStream_t s, int sms) {
  {
    const int B = 32, S = 4096, H = 32, KV = 8, D = 128;
    PagedSetup ps(B, S, 1, KV, D, 16, s);
    auto* q = static_cast<float*>(dmalloc(size_t{B} * H * D * 4));
    auto* out = static_cast<float*>(dmalloc(size_t{B} * H * D * 4));
    CK(launch_fill_random(DType::F32, q, int64_t{B} * H * D, 7, -2.0f, 2.0f, s));
    PagedAttnArgs a = ps.args(q, out, 1, S, H, KV, D, 16);
    const size_t ws_bytes = attention_workspace_bytes(a, AttnKernel::Decode, sms);
    void* ws = dmalloc(ws_bytes + 16);
    CK(launch_paged_attention(a, AttnKernel::Decode, ws, ws_bytes, sms, s));
    CK(cudaStreamSynchronize(s));
    for (void* p : {static_cast<void*>(q), static_cast<void*>(out), ws}) CK(cudaFree(p));
  }
  {
    const ProfilePrefill p(s);
    CK(launch_paged_attention(p.a, AttnKernel::Prefill, nullptr, 0, sms, s));
    CK(cudaStreamSynchronize(s));
  }
  const int64_t m = 14336, k = 4096;
  void* w = dmalloc(size_t(m * k) * 2);
  auto* x = static_cast<float*>(dmalloc(size_t(k) * 4));
  auto* y = static_cast<float*>(dmalloc(size_t(m) * 4));
  CK(launch_fill_random(DType::BF16, w, m * k, 9, -0.05f, 0.05f, s));
  CK(launch_fill_random(DType::F32, x, k, 10, -1.0f, 1.0f, s));
  CK(launch_gemv_bf16(w, x, nullptr, y, 1, m, k, kGemvDefaultVariant, false, s));
  CK(cudaStreamSynchronize(s));
  for (void* p : {w, static_cast<void*>(x), static_cast<void*>(y)}) CK(cudaFree(p));
}

// One launch each of the default decode kernel on a bf16 and an fp8_e4m3 cache (batch 256,
// 1024 keys: the shape of a 256-sequence decode step), for `ncu -k regex:paged_attn`.
void profile_decode_once(cudaStream_t s, int sms) {
  const int B = 256, S = 1024, H = 32, KV = 8, D = 128;
  auto* q = static_cast<float*>(dmalloc(size_t{B} * H * D * 4));
  auto* out = static_cast<float*>(dmalloc(size_t{B} * H * D * 4));
  CK(launch_fill_random(DType::F32, q, int64_t{B} * H * D, 7, -2.0f, 2.0f, s));
  for (DType kv : {DType::BF16, DType::FP8_E4M3}) {
    PagedSetup ps(B, S, 1, KV, D, 16, s, kv);
    PagedAttnArgs a = ps.args(q, out, 1, S, H, KV, D, 16);
    const size_t ws_bytes = attention_workspace_bytes(a, AttnKernel::Decode, sms);
    void* ws = dmalloc(ws_bytes + 16);
    CK(launch_paged_attention(a, AttnKernel::Decode, ws, ws_bytes, sms, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaFree(ws));
  }
  CK(cudaFree(q));
  CK(cudaFree(out));
}

// One packed-GEMM shape for ncu (`ncu -k regex:qgemm_kernel --launch-skip 10 --launch-count
// 1`): `qgemm-one int4|int8 M K N`, 20 launches with the planner's cut; `qgemm-wg-one` the
// same for the wgmma GEMM (`-k regex:qgemm_wg_kernel`).
void profile_qgemm_one(cudaStream_t s, int sms, int argc, char** argv, bool wg) {
  const char* mode = wg ? "qgemm-wg-one" : "qgemm-one";
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s int4|int8 M K N\n", mode);
    std::exit(2);
  }
  const std::string fs = argv[2];
  const QFormat f = fs == "int8" ? QFormat::Int8 : QFormat::Int4;
  const int64_t m = std::atoll(argv[3]), k = std::atoll(argv[4]);
  const int n = std::atoi(argv[5]);
  const PackedGemvData data(f, m, k, 3, s);
  auto* x = static_cast<float*>(dmalloc(static_cast<size_t>(n * k) * 4));
  auto* y = static_cast<float*>(dmalloc(static_cast<size_t>(n * m) * 4));
  void* xq = dmalloc(wg ? qgemm_wg_x_bytes(f, n, k) : qgemm_x_bytes(f, n, k));
  CK(launch_fill_random(DType::F32, x, n * k, 5, -1.0f, 1.0f, s));
  const QGemmPlan plan = plan_qgemm(f, n, m, k, sms);
  const QGemmWgPlan wg_plan = plan_qgemm_wg(f, n, m, k, sms);
  for (int i = 0; i < 20; ++i) {
    const void* w = data.w[i % data.copies()];
    CK(wg ? launch_qgemm_wg(f, w, m, k, x, n, nullptr, y, false, wg_plan, xq, /*pdl=*/true, s)
          : launch_qgemm(f, w, m, k, x, n, nullptr, y, false, plan, xq, /*pdl=*/true, s));
  }
  CK(cudaStreamSynchronize(s));
  std::printf("%s %s %lldx%lld n=%d (%d k slices): 20 launches\n", mode, fs.c_str(), static_cast<long long>(m),
              static_cast<long long>(k), n, wg ? wg_plan.splits : plan.splits);
  for (void* p : {static_cast<void*>(x), static_cast<void*>(y), xq}) CK(cudaFree(p));
}

// One packed GEMV shape, launched plainly (no graph) 20 times over rotating copies, for
// `ncu -k regex:qgemv --launch-skip 10 --launch-count 1`: `qgemv-one int4|fp8|int8 M K N [glu]`.
void profile_qgemv_one(cudaStream_t s, int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: qgemv-one int4|fp8|int8 M K N [glu]\n");
    std::exit(2);
  }
  const std::string fs = argv[2];
  const QFormat f = fs == "int4" ? QFormat::Int4 : fs == "int8" ? QFormat::Int8 : QFormat::Fp8;
  const int64_t m = std::atoll(argv[3]), k = std::atoll(argv[4]);
  const int n = std::atoi(argv[5]);
  const bool glu = argc > 6 && std::string(argv[6]) == "glu";
  const PackedGemvData data(f, m, k, 3, s);
  for (int i = 0; i < 20; ++i) data.launch(i, f, m, k, n, glu, QGemvPath::Auto, s);
  CK(cudaStreamSynchronize(s));
  std::printf("qgemv-one %s %lldx%lld n=%d%s: 20 launches\n", fs.c_str(), static_cast<long long>(m),
              static_cast<long long>(k), n, glu ? " glu" : "");
}

// Time per launch of one packed GEMV at several row counts (graph of back-to-back launches, as
// the qgemv table times them), to see how the one-wave persistent grid's tile count per block
// shows in the time: `qgemv-sweep int4|fp8|int8 K N glu|plain M...`.
void profile_qgemv_sweep(cudaStream_t s, int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: qgemv-sweep int4|fp8|int8 K N glu|plain M...\n");
    std::exit(2);
  }
  const std::string fs = argv[2];
  const QFormat f = fs == "int4" ? QFormat::Int4 : fs == "int8" ? QFormat::Int8 : QFormat::Fp8;
  const int64_t k = std::atoll(argv[3]);
  const int n = std::atoi(argv[4]);
  const bool glu = std::string(argv[5]) == "glu";
  // EMBER_BENCH_QGEMV_COPIES=1: every launch reads the same weights, so that shapes that fit in
  // L2 time the kernel's own rate rather than DRAM's.
  const char* copies_env = std::getenv("EMBER_BENCH_QGEMV_COPIES");
  const int exact_copies = copies_env ? std::max(1, std::atoi(copies_env)) : 0;
  for (int a = 6; a < argc; ++a) {
    const int64_t m = std::atoll(argv[a]);
    const PackedGemvData data(f, m, k, 2, s, exact_copies);
    const int per_graph = std::max(data.copies() * 4, 16);
    const double ms = time_graph(s, per_graph, 9, [&](int i) { data.launch(i, f, m, k, n, glu, QGemvPath::Auto, s); });
    const double bytes = (glu ? 2.0 : 1.0) * static_cast<double>(data.qbytes);
    std::printf("qgemv-sweep %s%s %lldx%lld n=%d: %.2f us, %.0f GB/s, %lld tiles of 16 rows\n", fs.c_str(),
                glu ? " glu" : "", static_cast<long long>(m), static_cast<long long>(k), n, ms * 1e3,
                bytes / (ms * 1e-3) / 1e9, static_cast<long long>((m + 15) / 16));
  }
}

// One wgmma prefill-attention variant (bf16 K/V, causal 4096 tokens, 32 heads / 8 KV heads of
// 128), launched 3 times, for `ncu -k regex:wgmma --launch-skip 2 --launch-count 1`:
// `prefill-one KEYS MODE`.
void profile_prefill_one(cudaStream_t s, int sms, int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: prefill-one KEYS MODE\n");
    std::exit(2);
  }
  ProfilePrefill p(s);
  p.a.prefill_keys = std::atoi(argv[2]);
  p.a.prefill_mode = std::atoi(argv[3]);
  p.a.wgmma = wgmma_prefill_available(0);
  for (int i = 0; i < 3; ++i) CK(launch_paged_attention(p.a, AttnKernel::PrefillWgmma, nullptr, 0, sms, s));
  CK(cudaStreamSynchronize(s));
  std::printf("prefill-one keys %d mode %d: 3 launches\n", p.a.prefill_keys, p.a.prefill_mode);
}

// The batch-1 decode attention and the o projection (Llama-3-8B: 32 query heads, 8 K/V heads,
// o 4096 x 4096) as two kernels (the decode attention, then the packed GEMV) and as one
// (attn_o.cuh: blocks of 512 and 256 threads, of 32 o rows and for int4 of 64), each launch on
// the next of 8 sequences' K/V and the next copy of the o weights (more than the L2 holds), PDL
// on every launch as in a step. The fused kernel's active clusters beside its grid's (the
// backend takes it only in one wave); the keys-split form (attn_o_split.cuh) last.
void bench_attn_o(cudaStream_t s, int sms) {
  const int H = 32, KV = 8, D = 128, bs = 16, seqs = 8;
  const int64_t m = 4096, k = int64_t{H} * D;
  auto* q = static_cast<float*>(dmalloc(static_cast<size_t>(k) * 4));
  auto* out = static_cast<float*>(dmalloc(static_cast<size_t>(k) * 4));
  auto* acc = static_cast<float*>(dmalloc(static_cast<size_t>(m) * 4));
  auto* ids = static_cast<int32_t*>(dmalloc(seqs * 4));
  auto* part = static_cast<float*>(dmalloc(static_cast<size_t>(KV * m) * 4));
  auto* counters = static_cast<uint32_t*>(dmalloc(kAttnOSplitMaxChunks * 4));
  CK(cudaMemset(counters, 0, kAttnOSplitMaxChunks * 4));
  CK(launch_fill_random(DType::F32, q, k, 7, -0.5f, 0.5f, s));
  CK(launch_fill_random(DType::F32, acc, m, 8, -1.0f, 1.0f, s));
  std::vector<int32_t> iota(seqs);
  std::iota(iota.begin(), iota.end(), 0);
  CK(cudaMemcpy(ids, iota.data(), iota.size() * 4, cudaMemcpyHostToDevice));
  for (QFormat f : {QFormat::Int4, QFormat::Fp8}) {
    const char* fname = f == QFormat::Int4 ? "int4" : "fp8";
    const PackedGemvData data(f, m, k, 2, s);
    const int copies = data.copies();
    for (int len : {128, 384, 1024, 2048}) {
      PagedSetup ps(seqs, len, 1, KV, D, bs, s);
      auto attn_args = [&](int i) {
        PagedAttnArgs a = ps.args(q, out, 1, len, H, KV, D, bs);
        a.seq_ids = ids + i % seqs;
        a.n_launch_seqs = 1;
        a.pdl = true;
        return a;
      };
      const size_t ws_bytes = attention_workspace_bytes(attn_args(0), AttnKernel::Decode, sms);
      void* ws = ws_bytes ? dmalloc(ws_bytes) : nullptr;
      const std::string shape = std::string(fname) + " h32/kv8 len " + std::to_string(len) + " o 4096x4096";
      const int per_graph = std::max(copies, 64);
      auto attention = [&](int i) { CK(launch_paged_attention(attn_args(i), AttnKernel::Decode, ws, ws_bytes, sms, s)); };
      auto report = [&](const std::string& what, double ms, const std::string& note = "") {
        result("attn-o", what + " " + shape, ms * 1e3, "us", note);
      };
      report("attention", time_graph(s, per_graph, 9, attention));
      report("o GEMV", time_graph(s, per_graph, 9, [&](int i) { data.launch(i, f, m, k, 1, false, QGemvPath::Auto, s); }));
      report("attention + o GEMV", time_graph(s, per_graph, 9, [&](int i) {
               attention(i);
               data.launch(i, f, m, k, 1, false, QGemvPath::Auto, s);
             }));
      for (int variant : {0, 1, 2, 3}) {
        const int threads = variant % 2 ? 256 : 512, rows = variant >= 2 ? 64 : 32;
        if (rows == 64 && f != QFormat::Int4) continue;
        AttnOArgs a;
        a.rows = rows;
        a.attn = attn_args(0);
        a.format = f;
        a.w = data.w[0];
        a.m = m;
        a.acc = acc;
        a.threads = threads;
        if (!attn_o_takes(a)) {
          std::printf("SKIP|attn-o|fused %d threads %d rows %s|not taken\n", threads, rows, shape.c_str());
          continue;
        }
        const int clusters = attn_o_max_clusters(a);
        const double ms = time_graph(s, per_graph, 9, [&](int i) {
          a.attn = attn_args(i);
          a.w = data.w[i % copies];
          CK(launch_attn_o(a, s));
        });
        report("fused " + std::to_string(threads) + " threads " + std::to_string(rows) + " rows", ms,
               std::to_string(clusters) + " clusters at once, " + (attn_o_one_wave(a) ? "one wave" : "NOT one wave"));
      }
      {  // the keys-split form (attn_o_split.cuh)
        AttnOSplitArgs a{attn_args(0), f, data.w[0], m, acc, part, counters};
        if (!attn_o_split_takes(a)) {
          std::printf("SKIP|attn-o|split %s|not taken\n", shape.c_str());
        } else {
          const int parts = attn_o_split_parts(a);
          const double ms = time_graph(s, per_graph, 9, [&](int i) {
            a.attn = attn_args(i);
            a.w = data.w[i % copies];
            CK(launch_attn_o_split(a, s));
          });
          report("split", ms, std::to_string(parts) + " cluster(s) of 8 a K/V head");
        }
      }
      if (ws) CK(cudaFree(ws));
    }
  }
  for (void* p : {static_cast<void*>(q), static_cast<void*>(out), static_cast<void*>(acc), static_cast<void*>(ids),
                  static_cast<void*>(part), static_cast<void*>(counters)})
    CK(cudaFree(p));
}

// The floor of a kernel boundary: graphs of 200 trivial kernels, each reading what the one
// before wrote, launched plainly and as programmatic dependents.
void bench_pdl_chain(cudaStream_t s) {
  constexpr int kMaxBlocks = 528;
  float* buf = nullptr;
  CK(cudaMalloc(&buf, 2 * kMaxBlocks * sizeof(float)));
  CK(cudaMemset(buf, 0, 2 * kMaxBlocks * sizeof(float)));
  std::printf("\nkernel boundary: 200 dependent trivial kernels in one graph (us per kernel)\n");
  std::printf("%8s %8s %10s %10s\n", "blocks", "threads", "plain", "PDL");
  for (int blocks : {1, 8, 132, 264, kMaxBlocks}) {
    for (int threads : {128, 256}) {
      double us[2];
      for (int pdl = 0; pdl < 2; ++pdl)
        us[pdl] = 1e3 * cuda::bench::graph_median_ms(s, 200, 20, 2, [&](int) {
          return cuda::bench::launch_chain_kernel(buf, blocks, threads, pdl == 1, s) == cudaSuccess;
        });
      std::printf("%8d %8d %10.2f %10.2f\n", blocks, threads, us[0], us[1]);
    }
  }
  CK(cudaFree(buf));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  CK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, %.1f GiB, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
              prop.totalGlobalMem / double(1 << 30), prop.l2CacheSize >> 20);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto lt = LtGemm::create();
  if (!lt.is_ok()) {
    std::fprintf(stderr, "%s\n", lt.message().c_str());
    return 1;
  }
  if (only == "qgemv-sweep") {
    profile_qgemv_sweep(s, argc, argv);
    return 0;
  }
  if (only == "qgemv-one") {
    profile_qgemv_one(s, argc, argv);
    return 0;
  }
  if (only == "qgemm-one" || only == "qgemm-wg-one") {
    profile_qgemm_one(s, prop.multiProcessorCount, argc, argv, only == "qgemm-wg-one");
    return 0;
  }
  if (only == "prefill-one") {
    profile_prefill_one(s, prop.multiProcessorCount, argc, argv);
    return 0;
  }
  if (only == "attn-o") {
    bench_attn_o(s, prop.multiProcessorCount);
    return 0;
  }
  if (only == "pdl-chain") {
    bench_pdl_chain(s);
    return 0;
  }
  if (only == "profile-decode") {
    profile_decode_once(s, prop.multiProcessorCount);
    return 0;
  }
  const double copy = only == "profile" ? 0.0 : copy_bandwidth(s);
  if (only.empty() || only == "gemv") bench_gemv(s, copy, **lt);
  if (only.empty() || only == "gemv" || only == "qgemv") bench_qgemv(s, copy, **lt);
  if (only.empty() || only == "qgemm") bench_qgemm(s, copy, **lt, prop.multiProcessorCount);
  if (only == "qgemm-wg") bench_qgemm_wg(s, **lt, prop.multiProcessorCount);
  if (only == "profile") {
    profile_once(s, prop.multiProcessorCount);
    return 0;
  }
  if (only.empty() || only == "decode") bench_decode_attention(s, copy, prop.multiProcessorCount);
  if (only.empty() || only == "prefill") bench_prefill_attention(s, prop.multiProcessorCount);
  if (only.empty() || only == "gemm") bench_gemm(s, **lt);
  CK(cudaStreamDestroy(s));
  return 0;
}
