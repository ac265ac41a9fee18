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

void cpu_matmul(CpuContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
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
  if (n == 0 || m == 0) return;

  // Batch-invariant mode keeps one kernel per weight whatever the row count.
  const MatmulKernel& kern = n == 1 && !ctx.batch_invariant ? ctx.kt.matmul_stream[idx] : ctx.kt.matmul[idx];
  const GemmKernel& gk = ctx.kt.gemm[idx];
  const int64_t gemm_min_rows = gk.fused ? gk.fused_min_rows : kGemmMinRows;
  if (gk.decode && n >= gemm_min_rows && !ctx.batch_invariant) {
    run_panel_gemm(ctx, gk, gk.act, x.as<float>(), n, k, static_cast<const uint8_t*>(w.data), w.row_bytes(), m,
                   out.as<float>(), pbias);
    return;
  }
  MatmulProblem p;
  p.k = k;
  p.w = static_cast<const uint8_t*>(w.data);
  p.w_stride = w.row_bytes();
  p.out = out.as<float>();
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

  if (quantized_act) {
    for (auto& s : ctx.thread_scratch) s.ensure(static_cast<size_t>(n) * p.a_stride);
  }
  // Columns are handed out in chunks through a shared counter: a thread that runs slower
  // (a busy sibling core, a preemption) simply takes fewer chunks.
  const int64_t chunk = std::max<int64_t>(16, (m / (ctx.pool.size() * 8) + 15) / 16 * 16);
  std::atomic<int64_t> next{0};
  ctx.pool.run([&](int ith, int) {
    MatmulProblem tp = p;
    bool have_act = !quantized_act;
    for (int64_t c0 = next.fetch_add(chunk, std::memory_order_relaxed); c0 < m;
         c0 = next.fetch_add(chunk, std::memory_order_relaxed)) {
      if (!have_act) {
        uint8_t* a = ctx.thread_scratch[static_cast<size_t>(ith)].ensure(static_cast<size_t>(n) * p.a_stride);
        quantize_rows(ctx.kt, kern.act, px, k, a, p.a_stride, 0, n);
        tp.a = a;
        have_act = true;
      }
      const int64_t c1 = std::min(m, c0 + chunk);
      kern.fn(tp, 0, n, c0, c1);
      if (pbias) add_bias(tp.out, tp.out_stride, pbias, 0, n, c0, c1);
    }
  });
}

}  // namespace ember::cpu
