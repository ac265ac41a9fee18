// Elementwise ops: add, scale, glu, and the greedy pick of each logit row (argmax_rows). Memory-bound; small tensors stay on the calling thread
// because waking the pool costs more than the work.
#include "backend/cpu/context.h"

#include <algorithm>
#include <atomic>

namespace ember::cpu {

namespace {
constexpr int64_t kMinParallelElems = 1 << 15;

// Runs fn(begin, end) over [0, n) on the pool when n is large, else inline.
template <typename Fn>
void run_elementwise(CpuContext& ctx, int64_t n, int64_t align, Fn&& fn) {
  if (n < kMinParallelElems || ctx.pool.size() == 1) {
    fn(int64_t{0}, n);
    return;
  }
  ctx.pool.run([&](int ith, int nth) {
    const Range r = split_range(n, ith, nth, align);
    if (r.begin < r.end) fn(r.begin, r.end);
  });
}

void check_f32(const Tensor& t, const char* what) {
  EMBER_CHECK(t.dtype == DType::F32 && t.device == Device::CPU && t.valid(), "{}: expected a F32 host tensor",
              what);
}
}  // namespace

Range split_range(int64_t n, int ith, int nth, int64_t align) {
  int64_t chunk = (n + nth - 1) / nth;
  chunk = (chunk + align - 1) / align * align;
  const int64_t begin = std::min<int64_t>(n, chunk * ith);
  const int64_t end = ith == nth - 1 ? n : std::min<int64_t>(n, begin + chunk);
  return {begin, end};
}

void cpu_add(CpuContext& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  check_f32(a, "add a");
  check_f32(b, "add b");
  check_f32(out, "add out");
  const int64_t n = a.numel();
  EMBER_CHECK(b.numel() == n && out.numel() == n, "add: sizes {} {} {}", n, b.numel(), out.numel());
  const float* pa = a.as<float>();
  const float* pb = b.as<float>();
  float* po = out.as<float>();
  run_elementwise(ctx, n, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) po[i] = pa[i] + pb[i];
  });
}

void cpu_scale(CpuContext& ctx, Tensor& x, float s) {
  check_f32(x, "scale x");
  float* p = x.as<float>();
  run_elementwise(ctx, x.numel(), 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) p[i] *= s;
  });
}

void cpu_softcap(CpuContext& ctx, Tensor& x, float cap) {
  check_f32(x, "softcap x");
  float* p = x.as<float>();
  run_elementwise(ctx, x.numel(), 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) p[i] = cap * std::tanh(p[i] / cap);  // (transformers' order)
  });
}

Status cpu_argmax_rows(CpuContext& ctx, const Tensor& logits, int32_t* ids) {
  if (logits.dtype != DType::F32 || logits.n_dims != 2)
    return Status::errorf("argmax_rows: logits {} {}, want 2-D F32", dtype_name(logits.dtype), shape_string(logits));
  const int64_t rows = logits.n_rows(), cols = logits.n_cols();
  const float* p = logits.as<float>();
  // Rows are handed out one at a time: each is a vocabulary-long scan (1 MiB for 262k).
  std::atomic<int64_t> next{0};
  ctx.pool.run([&](int, int) {
    for (int64_t r = next.fetch_add(1, std::memory_order_relaxed); r < rows;
         r = next.fetch_add(1, std::memory_order_relaxed))
      ids[r] = static_cast<int32_t>(std::max<int64_t>(0, ctx.kt.argmax_f32(p + r * cols, cols)));
  });
  return Status::ok();
}

void cpu_glu(CpuContext& ctx, const Tensor& gate, const Tensor& up, bool gelu_tanh, Tensor& out) {
  check_f32(gate, "glu gate");
  check_f32(up, "glu up");
  check_f32(out, "glu out");
  const int64_t n = gate.numel();
  EMBER_CHECK(up.numel() == n && out.numel() == n, "glu: sizes {} {} {}", n, up.numel(), out.numel());
  const auto fn = gelu_tanh ? ctx.kt.gelu_tanh_mul : ctx.kt.silu_mul;
  const float* g = gate.as<float>();
  const float* u = up.as<float>();
  float* o = out.as<float>();
  // glu costs an exp per element, so it is worth threading at a smaller size (but a decode
  // step's few thousand elements take less than a pool wake-up).
  if (n < kMinParallelElems / 2 || ctx.pool.size() == 1) {
    fn(g, u, o, n);
    return;
  }
  ctx.pool.run([&](int ith, int nth) {
    const Range r = split_range(n, ith, nth, 16);
    if (r.begin < r.end) fn(g + r.begin, u + r.begin, o + r.begin, r.end - r.begin);
  });
}

}  // namespace ember::cpu
