// matmul driver: out[n, m] = x[n, k] @ w[m, k]^T (+ bias). Chooses the kernel for w's dtype,
// quantizes activation rows for the integer kernels, and splits the work over threads with
// one pool run per call:
//  - few rows (decode, short verification batches): threads share out the weight rows
//    (output columns) in chunks so every weight byte is read once; each thread quantizes all
//    n activation rows into its own scratch (n * k is tiny next to m * k), so no thread waits
//    for another.
//  - many rows (prompt processing) with a panel GEMM for the dtype: see matmul_gemm.cpp.
//  - many rows otherwise: threads split the activation rows; each quantizes only its own
//    rows and runs the row-tile kernel over all weights, re-read from cache per row block.
#include "backend/cpu/context.h"
#include "backend/cpu/matmul_gemm.h"

#include <algorithm>
#include <atomic>
#include <span>
#include <vector>

namespace ember::cpu {

namespace {

constexpr int64_t kSplitRowsThreshold = 64;  // n at which threads split activation rows
constexpr int64_t kRowBlock = 64;             // activation rows per cache block
constexpr int64_t kColBlock = 512;            // weight rows per cache block (many-row case)
constexpr int64_t kMinParallelWork = 1 << 16; // n * m * k below this runs on one thread
constexpr int64_t kGemmMinRows = 8;            // n from which the panel GEMM beats row tiles

void add_bias(float* out, int64_t out_stride, const float* bias, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) out[r * out_stride + c] += bias[c];
}

void quantize_rows(const KernelTable& kt, ActFormat f, const float* x, int64_t k, uint8_t* dst, size_t stride,
                   int64_t r0, int64_t r1) {
  const QuantizeActFn q = f == ActFormat::Q8_K ? kt.quantize_q8_k : kt.quantize_q8_32;
  for (int64_t r = r0; r < r1; ++r) {
    q(x + r * k, dst + static_cast<size_t>(r) * stride, k);
    if (f == ActFormat::Q8_32P) permute_q8_32_halves(dst + static_cast<size_t>(r) * stride, k);
  }
}

// Rows [r0, r1) x columns [c0, c1) in cache blocks, bias added while the block is hot.
void run_blocks(const MatmulKernel& kern, const MatmulProblem& p, const float* bias, int64_t r0, int64_t r1,
                int64_t c0, int64_t c1) {
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    for (int64_t cb = c0; cb < c1; cb += kColBlock) {
      const int64_t ce = std::min(c1, cb + kColBlock);
      kern.fn(p, rb, re, cb, ce);
      if (bias) add_bias(p.out, p.out_stride, bias, rb, re, cb, ce);
    }
  }
}

}  // namespace

namespace {

// One weight of a call, checked against x.
struct Target {
  int idx;  // weight kind
  const uint8_t* w;
  size_t w_stride;
  int64_t m;
  float* out;
  const float* bias;  // null: none
};

Target check_target(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  EMBER_CHECK(x.dtype == DType::F32 && out.dtype == DType::F32, "matmul: x and out must be F32");
  EMBER_CHECK(x.device == Device::CPU && w.device == Device::CPU && out.device == Device::CPU,
              "matmul: host tensors only");
  const int idx = weight_kind_index(w.dtype);
  EMBER_CHECK(idx >= 0, "matmul: no kernel for weight dtype {}", dtype_name(w.dtype));
  const int64_t k = x.n_cols();
  const int64_t n = x.n_rows();
  const int64_t m = w.n_rows();
  EMBER_CHECK(w.n_cols() == k, "matmul: x {} vs w {}", shape_string(x), shape_string(w));
  EMBER_CHECK(k % dtype_block_size(w.dtype) == 0, "matmul: k {} not a multiple of the {} block", k,
              dtype_name(w.dtype));
  EMBER_CHECK(out.n_rows() == n && out.n_cols() == m, "matmul: out {} for x {} w {}", shape_string(out),
              shape_string(x), shape_string(w));
  const float* pbias = nullptr;
  if (bias && bias->valid()) {
    EMBER_CHECK(bias->dtype == DType::F32 && bias->numel() == m, "matmul: bias {} for m {}", shape_string(*bias), m);
    pbias = bias->as<float>();
  }
  return {idx, static_cast<const uint8_t*>(w.data), w.row_bytes(), m, out.as<float>(), pbias};
}

int64_t column_chunk(const CpuContext& ctx, int64_t m) {
  return std::max<int64_t>(16, (m / (ctx.pool.size() * 8) + 15) / 16 * 16);
}

// Few rows: threads share out the weight rows (output columns) of every target in chunks
// through one counter, so a thread that runs slower (a busy sibling core, a preemption) simply
// takes fewer chunks; each thread quantizes the n activation rows once into its own scratch.
void run_columns(CpuContext& ctx, const MatmulKernel& kern, const float* px, int64_t n, int64_t k,
                 std::span<const Target> targets) {
  const bool quantized_act = kern.act != ActFormat::F32;
  const size_t a_stride = quantized_act ? act_row_bytes(kern.act, k) : static_cast<size_t>(k) * 4;
  if (quantized_act)
    for (auto& s : ctx.thread_scratch) s.ensure(static_cast<size_t>(n) * a_stride);
  std::vector<int64_t> chunk(targets.size()), first(targets.size() + 1, 0);
  for (size_t t = 0; t < targets.size(); ++t) {
    chunk[t] = column_chunk(ctx, targets[t].m);
    first[t + 1] = first[t] + (targets[t].m + chunk[t] - 1) / chunk[t];
  }
  const int64_t n_items = first.back();
  std::atomic<int64_t> next{0};
  ctx.pool.run([&](int ith, int) {
    const uint8_t* a = quantized_act ? nullptr : reinterpret_cast<const uint8_t*>(px);
    for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < n_items;
         item = next.fetch_add(1, std::memory_order_relaxed)) {
      if (!a) {
        uint8_t* q = ctx.thread_scratch[static_cast<size_t>(ith)].ensure(static_cast<size_t>(n) * a_stride);
        quantize_rows(ctx.kt, kern.act, px, k, q, a_stride, 0, n);
        a = q;
      }
      const size_t t = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), item) - first.begin()) - 1;
      const Target& g = targets[t];
      const int64_t c0 = (item - first[t]) * chunk[t], c1 = std::min(g.m, c0 + chunk[t]);
      MatmulProblem p;
      p.k = k;
      p.w = g.w;
      p.w_stride = g.w_stride;
      p.a = a;
      p.a_stride = a_stride;
      p.out = g.out;
      p.out_stride = g.m;
      kern.fn(p, 0, n, c0, c1);
      if (g.bias) add_bias(g.out, g.m, g.bias, 0, n, c0, c1);
    }
  });
}

// The panel kernels' row threshold for a weight kind, or 0 when it has none.
int64_t panel_min_rows(const CpuContext& ctx, int idx) {
  const GemmKernel& gk = ctx.kt.gemm[idx];
  if ((!gk.micro && !gk.fused) || ctx.batch_invariant) return 0;
  return gk.fused ? gk.fused_min_rows : kGemmMinRows;
}

void run_panels(CpuContext& ctx, const float* px, int64_t n, int64_t k, std::span<const Target> targets) {
  const GemmKernel& gk = ctx.kt.gemm[targets[0].idx];
  std::vector<GemmTarget> g;
  g.reserve(targets.size());
  for (const Target& t : targets) g.push_back({t.w, t.w_stride, t.m, t.out, t.bias});
  run_panel_gemm(ctx, gk, gk.act, px, n, k, g);
}

}  // namespace

void cpu_matmul(CpuContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const Target tg = check_target(x, w, bias, out);
  const int idx = tg.idx;
  const int64_t k = x.n_cols();
  const int64_t n = x.n_rows();
  const int64_t m = tg.m;
  const float* pbias = tg.bias;
  if (n == 0 || m == 0) return;

  // Batch-invariant mode keeps one kernel per weight whatever the row count.
  const MatmulKernel& kern = n == 1 && !ctx.batch_invariant ? ctx.kt.matmul_stream[idx] : ctx.kt.matmul[idx];
  const int64_t gemm_min_rows = panel_min_rows(ctx, idx);
  if (gemm_min_rows > 0 && n >= gemm_min_rows) {
    run_panels(ctx, x.as<float>(), n, k, std::span<const Target>(&tg, 1));
    return;
  }
  MatmulProblem p;
  p.k = k;
  p.w = tg.w;
  p.w_stride = tg.w_stride;
  p.out = tg.out;
  p.out_stride = m;
  const float* px = x.as<float>();
  const bool quantized_act = kern.act != ActFormat::F32;
  p.a_stride = quantized_act ? act_row_bytes(kern.act, k) : static_cast<size_t>(k) * 4;
  if (!quantized_act) p.a = reinterpret_cast<const uint8_t*>(px);

  const int nth_pool = ctx.pool.size();
  const bool single = nth_pool == 1 || n * m * k < kMinParallelWork;
  const bool split_rows = !single && n >= kSplitRowsThreshold;

  if (single) {
    if (quantized_act) {
      uint8_t* a = ctx.shared_scratch.ensure(static_cast<size_t>(n) * p.a_stride);
      quantize_rows(ctx.kt, kern.act, px, k, a, p.a_stride, 0, n);
      p.a = a;
    }
    run_blocks(kern, p, pbias, 0, n, 0, m);
    return;
  }

  if (split_rows) {
    uint8_t* a = quantized_act ? ctx.shared_scratch.ensure(static_cast<size_t>(n) * p.a_stride) : nullptr;
    if (quantized_act) p.a = a;
    ctx.pool.run([&](int ith, int nth) {
      const Range r = split_range(n, ith, nth, 4);
      if (r.begin >= r.end) return;
      if (quantized_act) quantize_rows(ctx.kt, kern.act, px, k, a, p.a_stride, r.begin, r.end);
      run_blocks(kern, p, pbias, r.begin, r.end, 0, m);
    });
    return;
  }
  run_columns(ctx, kern, px, n, k, std::span<const Target>(&tg, 1));
}

void cpu_matmul_many(CpuContext& ctx, const Tensor& x, std::span<const MatmulTarget> targets) {
  // Shared work only where it pays and the kernels allow: weights of one kind, and either the
  // panel kernels (panels built once) or one decode row (one pool run over all columns, the
  // activation quantized once per thread). Anything else is a plain matmul per target.
  std::vector<Target> tg;
  tg.reserve(targets.size());
  for (const MatmulTarget& t : targets) tg.push_back(check_target(x, *t.w, t.bias, *t.out));
  const int64_t n = x.n_rows(), k = x.n_cols();
  bool shared = targets.size() > 1 && n > 0 && !ctx.batch_invariant;
  for (const Target& t : tg) shared = shared && t.idx == tg[0].idx && t.m > 0;
  if (shared) {
    const int idx = tg[0].idx;
    const int64_t gemm_min_rows = panel_min_rows(ctx, idx);
    int64_t work = 0;
    for (const Target& t : tg) work += n * t.m * k;
    if (gemm_min_rows > 0 && n >= gemm_min_rows) {
      run_panels(ctx, x.as<float>(), n, k, tg);
      return;
    }
    if (n == 1 && ctx.pool.size() > 1 && work >= kMinParallelWork && ctx.kt.matmul_stream[idx].act != ActFormat::F32) {
      run_columns(ctx, ctx.kt.matmul_stream[idx], x.as<float>(), n, k, tg);
      return;
    }
  }
  for (const MatmulTarget& t : targets) cpu_matmul(ctx, x, *t.w, t.bias, *t.out);
}

}  // namespace ember::cpu
