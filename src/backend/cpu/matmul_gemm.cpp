// Panel GEMM driver (prompt processing): activation rows are quantized once and interleaved
// into panels of 16 rows; every weight row is decoded once into int8 + per-group scales;
// the ISA's micro-kernel then multiplies panels by decoded columns (see kernels.h).
//
// Two pool runs: panels are built (activation rows quantized and interleaved), then output
// columns are computed in chunks over all panels, each weight row decoded exactly once. With
// one or two panels (the fused kernels) the panels are built on the calling thread instead.
#include "backend/cpu/context.h"
#include "backend/cpu/matmul_gemm.h"
#include <algorithm>
#include <atomic>
#include <vector>

namespace ember::cpu {

size_t gemm_col_bytes(int64_t k, int group) {
  const size_t b = static_cast<size_t>(k) + static_cast<size_t>(k / group) * 12;
  return (b + 63) / 64 * 64;
}

namespace {

constexpr int64_t kColChunk = 48;  // decoded columns kept hot (L2) while panels stream by
// Fused kernels re-read each weight row once per panel, the decoded path decodes it once per
// call: fused wins while the panels are few (bench_kernels --n 16,32,48). A kind without a
// micro-kernel (AVX2, where its fused form sums more products in int16) is fused throughout.
constexpr int64_t kFusedMaxPanels = 2;
constexpr int64_t kFusedColChunk = 64;  // weight rows handed out per claim

// A panel: qu [k/4][16][4], da, dsum and acorr [k/G][16] (dsum, acorr unused by some formats).
size_t panel_bytes(int64_t k, int group) {
  const size_t groups = static_cast<size_t>(k / group);
  return static_cast<size_t>(k) * kGemmPanelRows + groups * kGemmPanelRows * 4 * 3;
}

struct PanelBuffers {
  uint8_t* qu;
  float* da;
  float* dsum;     // null unless the weights have mins
  int32_t* acorr;  // null unless fused with an offset
};

PanelBuffers panel_at(uint8_t* base, int64_t p, int64_t k, int group, bool has_min, bool fused_off) {
  uint8_t* b = base + static_cast<size_t>(p) * panel_bytes(k, group);
  auto* da = reinterpret_cast<float*>(b + static_cast<size_t>(k) * kGemmPanelRows);
  const int64_t per = (k / group) * kGemmPanelRows;
  return {b, da, has_min ? da + per : nullptr, fused_off ? reinterpret_cast<int32_t*>(da + 2 * per) : nullptr};
}

// Interleaves quantized rows [row0, row0 + 16) (clamped to n - 1) into panel `pb`: values
// biased to unsigned (+128) for the decoded path, left signed for the fused one (`fused`,
// with acorr = -off * sum(q) when pb.acorr is set).
void build_panel(const uint8_t* rows, size_t a_stride, ActFormat fmt, int64_t row0, int64_t n, int64_t k, int group,
                 bool fused, int off, const PanelBuffers& pb) {
  const uint32_t bias = fused ? 0u : 0x80808080u;
  const int64_t ng = k / group;
  for (int i = 0; i < kGemmPanelRows; ++i) {
    const uint8_t* row = rows + static_cast<size_t>(std::min(row0 + i, n - 1)) * a_stride;
    const auto* d = reinterpret_cast<const float*>(row + k);
    for (int64_t g4 = 0; g4 < k / 4; ++g4) {
      uint32_t v;
      __builtin_memcpy(&v, row + 4 * g4, 4);
      v ^= bias;  // int8 q -> uint8 q + 128 (decoded path)
      __builtin_memcpy(pb.qu + (static_cast<size_t>(g4) * kGemmPanelRows + i) * 4, &v, 4);
    }
    if (fmt == ActFormat::Q8_32) {  // group == 32 == activation block
      const auto* sum = reinterpret_cast<const int32_t*>(d + k / 32);
      for (int64_t g = 0; g < ng; ++g) {
        pb.da[g * kGemmPanelRows + i] = d[g];
        if (pb.dsum) pb.dsum[g * kGemmPanelRows + i] = d[g] * static_cast<float>(sum[g]);
        if (pb.acorr) pb.acorr[g * kGemmPanelRows + i] = -off * sum[g];
      }
    } else {  // Q8_K: one scale per 256, sums per 16
      const auto* bsums = reinterpret_cast<const int16_t*>(d + k / 256);
      for (int64_t g = 0; g < ng; ++g) {
        const float da = d[g * group / 256];
        pb.da[g * kGemmPanelRows + i] = da;
        if (pb.dsum) {
          const int32_t s = group == 32 ? bsums[2 * g] + bsums[2 * g + 1] : bsums[g];
          pb.dsum[g * kGemmPanelRows + i] = da * static_cast<float>(s);
        }
        if (pb.acorr) {
          const int32_t s = group == 32 ? bsums[2 * g] + bsums[2 * g + 1] : bsums[g];
          pb.acorr[g * kGemmPanelRows + i] = -off * s;
        }
      }
    }
  }
}

}  // namespace

void run_panel_gemm(CpuContext& ctx, const GemmKernel& gk, ActFormat act, const float* x, int64_t n, int64_t k,
                    std::span<const GemmTarget> targets) {
  const size_t a_stride = act_row_bytes(act, k);
  const int64_t n_panels = (n + kGemmPanelRows - 1) / kGemmPanelRows;
  const bool fused = gk.fused != nullptr && (n_panels <= kFusedMaxPanels || gk.micro == nullptr);
  const bool serial_panels = fused && n_panels <= kFusedMaxPanels;
  const size_t rows_bytes = static_cast<size_t>(n) * a_stride;
  const size_t pbytes = panel_bytes(k, gk.group);
  uint8_t* shared = ctx.shared_scratch.ensure(rows_bytes + static_cast<size_t>(n_panels) * pbytes + 64);
  uint8_t* rows = shared;
  uint8_t* panels = shared + (rows_bytes + 63) / 64 * 64;
  const size_t col_bytes = gemm_col_bytes(k, gk.group);
  if (!fused)
    for (auto& s : ctx.thread_scratch) s.ensure(col_bytes * kColChunk);
  const QuantizeActFn quantize = act == ActFormat::Q8_K ? ctx.kt.quantize_q8_k : ctx.kt.quantize_q8_32;
  const bool with_acorr = fused && gk.fused_off != 0;
  auto panel = [&](int64_t p) { return panel_at(panels, p, k, gk.group, gk.has_min, with_acorr); };

  // Two runs, work handed out through counters: the end of a run is the barrier between
  // the phases, and a thread that is descheduled (a busy machine) just takes fewer items
  // instead of holding everyone at an in-run barrier.
  auto make_panel = [&](int64_t p) {
    const int64_t r0 = p * kGemmPanelRows, r1 = std::min(n, r0 + kGemmPanelRows);
    for (int64_t r = r0; r < r1; ++r) quantize(x + r * k, rows + static_cast<size_t>(r) * a_stride, k);
    build_panel(rows, a_stride, act, r0, n, k, gk.group, fused, gk.fused_off, panel(p));
  };
  if (serial_panels) {
    // One or two panels: cheaper on this thread than a fork/join (a batched decode step runs
    // ~7 of these matmuls per layer).
    for (int64_t p = 0; p < n_panels; ++p) make_panel(p);
  } else {
    std::atomic<int64_t> next_panel{0};
    ctx.pool.run([&](int, int) {
      for (int64_t p = next_panel.fetch_add(1, std::memory_order_relaxed); p < n_panels;
           p = next_panel.fetch_add(1, std::memory_order_relaxed))
        make_panel(p);
    });
  }
  // The columns of all targets form one index space, handed out in chunks that never straddle
  // two targets: chunk i of target t is item first[t] + i.
  const int64_t chunk = fused ? kFusedColChunk : kColChunk;
  std::vector<int64_t> first(targets.size() + 1, 0);
  for (size_t t = 0; t < targets.size(); ++t) first[t + 1] = first[t] + (targets[t].m + chunk - 1) / chunk;
  auto locate = [&](int64_t item, size_t& t, int64_t& c0, int& nc) {
    t = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), item) - first.begin()) - 1;
    c0 = (item - first[t]) * chunk;
    nc = static_cast<int>(std::min<int64_t>(chunk, targets[t].m - c0));
  };
  auto add_bias = [&](const GemmTarget& g, int64_t c0, int nc) {
    if (g.bias)
      for (int64_t r = 0; r < n; ++r)
        for (int c = 0; c < nc; ++c) g.out[r * g.m + c0 + c] += g.bias[c0 + c];
  };
  // Each pool thread claims items and runs fn(ith, target, c0, nc, panel_of) on them, where
  // panel_of(p) gives panel p's view and its rows.
  struct PanelView {
    GemmPanel ap;
    int64_t r0;
    int valid;
  };
  auto panel_of = [&](int64_t p) {
    const PanelBuffers pb = panel(p);
    const int64_t r0 = p * kGemmPanelRows;
    return PanelView{{pb.qu, pb.da, pb.dsum, pb.acorr}, r0,
                     static_cast<int>(std::min<int64_t>(kGemmPanelRows, n - r0))};
  };
  std::atomic<int64_t> next_item{0};
  const int64_t n_items = first.back();
  auto run_items = [&](auto&& fn) {
    ctx.pool.run([&](int ith, int) {
      for (int64_t item = next_item.fetch_add(1, std::memory_order_relaxed); item < n_items;
           item = next_item.fetch_add(1, std::memory_order_relaxed)) {
        size_t t;
        int64_t c0;
        int nc;
        locate(item, t, c0, nc);
        fn(ith, targets[t], c0, nc);
        add_bias(targets[t], c0, nc);
      }
    });
  };
  if (fused) {  // weight rows straight from memory against every panel
    run_items([&](int, const GemmTarget& g, int64_t c0, int nc) {
      for (int64_t p = 0; p < n_panels; ++p) {
        const PanelView v = panel_of(p);
        gk.fused(v.ap, g.w + static_cast<size_t>(c0) * g.w_stride, g.w_stride, nc, k, g.out + v.r0 * g.m + c0, g.m,
                 v.valid);
      }
    });
    return;
  }
  // Output columns in chunks of kColChunk against every panel; each weight row is decoded once.
  run_items([&](int ith, const GemmTarget& g, int64_t c0, int nc) {
    uint8_t* cols = ctx.thread_scratch[static_cast<size_t>(ith)].ensure(col_bytes * kColChunk);
    for (int c = 0; c < nc; ++c) gk.decode(g.w + static_cast<size_t>(c0 + c) * g.w_stride, k, cols + c * col_bytes);
    for (int64_t p = 0; p < n_panels; ++p) {
      const PanelView v = panel_of(p);
      gk.micro(v.ap, cols, col_bytes, nc, k, g.out + v.r0 * g.m + c0, g.m, v.valid);
    }
  });
}

}  // namespace ember::cpu
