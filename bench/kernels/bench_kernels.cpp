// CPU kernel benchmark: matmul per weight dtype at model shapes (GB/s of weights for n = 1,
// GFLOP/s for prompt-sized n) and attention (decode and prefill), printed as a table.
//
//   bench_kernels [--threads N] [--isa scalar|avx2|avx512] [--dtype q4_0,q8_0,...]
//                 [--n 1,512] [--shapes 896x896,...] [--min-time 0.3] [--no-attention]
//                 [--cpu-time]   (CPU seconds of the process: robust on a busy machine with
//                                 --threads 1; with more threads it counts spinning too)
#include "backend/cpu/cpu_backend.h"
#include "core/half.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace ember;

struct Options {
  int threads = 0;
  std::string isa;
  std::vector<std::string> dtypes = {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
                                     "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};
  std::vector<int64_t> ns = {1, 512};
  std::vector<std::pair<int64_t, int64_t>> shapes = {{896, 896}, {4864, 896}, {896, 4864}, {151936, 896}};
  double min_time = 0.3;
  bool attention = true;
  std::string attention_filter;  // only attention cases whose name contains this
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(sep, b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

DType parse_dtype(const std::string& s) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    if (dtype_name(t) == s) return t;
  fmt::print(stderr, "unknown dtype {}\n", s);
  std::exit(2);
}

bool g_cpu_time = false;
bool g_huge = false;  // --huge: weights in 2 MB transparent huge pages (madvise)  // --cpu-time: process CPU seconds instead of wall time

double now_seconds() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call: best of repeated calls after a warm-up.
double time_it(const std::function<void()>& fn, double min_time) {
  fn();
  double best = 1e30, total = 0;
  int reps = 0;
  while (total < min_time || reps < 3) {
    const double t0 = now_seconds();
    fn();
    const double dt = now_seconds() - t0;
    best = std::min(best, dt);
    total += dt;
    ++reps;
  }
  return best;
}

std::vector<uint8_t> random_weights(std::mt19937& rng, DType t, int64_t m, int64_t k) {
  std::vector<uint8_t> w(dtype_row_bytes(t, k) * static_cast<size_t>(m));
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  if (t == DType::F32) {
    for (size_t i = 0; i < w.size() / 4; ++i) {
      const float f = nd(rng);
      std::memcpy(w.data() + 4 * i, &f, 4);
    }
  } else if (t == DType::F16 || t == DType::BF16) {
    for (size_t i = 0; i < w.size() / 2; ++i) {
      const float f = nd(rng);
      const uint16_t h = t == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f);
      std::memcpy(w.data() + 2 * i, &h, 2);
    }
  } else {
    for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
    // Scale fields hold garbage f16 here; speed does not depend on their values, but keep
    // them finite so nothing traps on NaN paths.
    const size_t bb = dtype_block_bytes(t);
    for (size_t i = 0; i < w.size(); i += bb)
      for (size_t o = 0; o < bb; o += 2)
        if ((w[i + o + 1] & 0x7c) == 0x7c) w[i + o + 1] &= 0xbf;
  }
  return w;
}

void bench_matmul(Backend& be, const Options& opt) {
  fmt::print("{:<7} {:>14} {:>5} {:>10} {:>10} {:>10}\n", "dtype", "m x k", "n", "us/call", "GB/s(w)", "GFLOP/s");
  std::mt19937 rng(1);
  for (const auto& dname : opt.dtypes) {
    const DType t = parse_dtype(dname);
    for (auto [m, k] : opt.shapes) {
      if (k % dtype_block_size(t) != 0) {
        fmt::print("{:<7} {:>14} {:>5} {:>10}\n", dname, fmt::format("{}x{}", m, k), "-", "k % block");
        continue;
      }
      auto w = random_weights(rng, t, m, k);
      void* wdata = w.data();
      void* huge = nullptr;
      if (g_huge) {
        huge = mmap(nullptr, w.size() + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(huge) + (2 << 20) - 1) & ~uintptr_t((2 << 20) - 1));
        madvise(aligned, w.size(), MADV_HUGEPAGE);
        std::memcpy(aligned, w.data(), w.size());
        wdata = aligned;
      }
      Tensor tw = make_tensor(wdata, t, {m, k});
      for (int64_t n : opt.ns) {
        if (n > 64 && m > 100000) continue;  // logits are computed for a few rows only
        std::vector<float> x(static_cast<size_t>(n * k)), out(static_cast<size_t>(n * m));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& v : x) v = nd(rng);
        Tensor tx = make_tensor(x.data(), DType::F32, {n, k});
        Tensor to = make_tensor(out.data(), DType::F32, {n, m});
        const double s = time_it([&] { be.matmul(tx, tw, nullptr, to); }, opt.min_time);
        const double gbs = static_cast<double>(tw.nbytes()) / s / 1e9;
        const double gflops = 2.0 * n * m * k / s / 1e9;
        fmt::print("{:<7} {:>14} {:>5} {:>10.1f} {:>10.2f} {:>10.1f}\n", dname, fmt::format("{}x{}", m, k), n,
                   s * 1e6, gbs, gflops);
        std::fflush(stdout);
      }
      if (huge) munmap(huge, w.size() + (2 << 20));
    }
  }
}

void bench_attention(Backend& be, const Options& opt) {
  struct Case {
    const char* name;
    int n_heads, n_kv, head_dim, ctx, n_new;
    DType cache;
  };
  const Case cases[] = {
      {"decode ctx=1024", 14, 2, 64, 1024, 1, DType::F16},   {"decode ctx=4096", 14, 2, 64, 4096, 1, DType::F16},
      {"decode ctx=4096 f32", 14, 2, 64, 4096, 1, DType::F32}, {"prefill 512", 14, 2, 64, 512, 512, DType::F16},
      {"decode ctx=4096 d128", 32, 8, 128, 4096, 1, DType::F16},
  };
  fmt::print("\n{:<24} {:>10} {:>10}\n", "attention (qwen-0.5b heads)", "us/call", "GFLOP/s");
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto& c : cases) {
    if (!opt.attention_filter.empty() && std::string(c.name).find(opt.attention_filter) == std::string::npos) continue;
    const int bs = 16, n_blocks = (c.ctx + bs - 1) / bs;
    const size_t elems = static_cast<size_t>(n_blocks) * bs * c.n_kv * c.head_dim;
    std::vector<uint8_t> kc(elems * dtype_block_bytes(c.cache)), vc(kc.size());
    for (size_t i = 0; i < elems; ++i) {
      const float a = nd(rng), b = nd(rng);
      if (c.cache == DType::F16) {
        const uint16_t ha = f32_to_f16(a), hb = f32_to_f16(b);
        std::memcpy(kc.data() + 2 * i, &ha, 2);
        std::memcpy(vc.data() + 2 * i, &hb, 2);
      } else {
        std::memcpy(kc.data() + 4 * i, &a, 4);
        std::memcpy(vc.data() + 4 * i, &b, 4);
      }
    }
    KvLayer kv;
    kv.k = make_tensor(kc.data(), c.cache, {n_blocks, bs, c.n_kv, c.head_dim});
    kv.v = make_tensor(vc.data(), c.cache, {n_blocks, bs, c.n_kv, c.head_dim});
    kv.block_size = bs;
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    for (int i = 0; i < n_blocks; ++i) table[i] = i;
    std::vector<int32_t> qstart = {0, c.n_new}, lens = {c.ctx};
    std::vector<float> q(static_cast<size_t>(c.n_new) * c.n_heads * c.head_dim), out(q.size());
    for (auto& v : q) v = nd(rng);
    AttentionBatch batch{1, qstart.data(), lens.data(), table.data(), n_blocks};
    AttentionParams p;
    p.n_heads = c.n_heads;
    p.n_kv_heads = c.n_kv;
    p.head_dim = c.head_dim;
    p.scale = 0.125f;
    Tensor tq = make_tensor(q.data(), DType::F32, {c.n_new, c.n_heads, c.head_dim});
    Tensor to = make_tensor(out.data(), DType::F32, {c.n_new, c.n_heads, c.head_dim});
    const double s = time_it([&] { be.attention(tq, kv, batch, p, to); }, opt.min_time);
    // QK^T and PV: 4 * head_dim flops per (query, head, visible key).
    double pairs = 0;
    for (int j = 0; j < c.n_new; ++j) pairs += c.ctx - c.n_new + j + 1;
    const double flops = 4.0 * c.head_dim * c.n_heads * pairs;
    fmt::print("{:<24} {:>10.1f} {:>10.1f}\n", c.name, s * 1e6, flops / s / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "{} needs a value\n", a);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") opt.threads = std::stoi(next());
    else if (a == "--isa") opt.isa = next();
    else if (a == "--dtype") opt.dtypes = split(next(), ',');
    else if (a == "--n") {
      opt.ns.clear();
      for (auto& s : split(next(), ',')) opt.ns.push_back(std::stoll(s));
    } else if (a == "--shapes") {
      opt.shapes.clear();
      for (auto& s : split(next(), ',')) {
        auto mk = split(s, 'x');
        opt.shapes.push_back({std::stoll(mk.at(0)), std::stoll(mk.at(1))});
      }
    } else if (a == "--min-time") opt.min_time = std::stod(next());
    else if (a == "--no-attention") opt.attention = false;
    else if (a == "--cpu-time") g_cpu_time = true;
    else if (a == "--huge") g_huge = true;
    else if (a == "--no-matmul") opt.dtypes.clear();
    else if (a == "--attention-filter") opt.attention_filter = next();
    else {
      fmt::print(stderr, "usage: bench_kernels [--threads N] [--isa I] [--dtype a,b] [--n 1,512] [--shapes MxK,...] "
                         "[--min-time S] [--no-attention] [--no-matmul]\n");
      return 2;
    }
  }
  auto be = opt.isa.empty() ? make_cpu_backend(opt.threads) : make_cpu_backend_isa(opt.threads, opt.isa);
  if (!be) {
    fmt::print(stderr, "isa {} not available\n", opt.isa);
    return 1;
  }
  fmt::print("backend: {}\n", be->name());
  if (!opt.dtypes.empty()) bench_matmul(*be, opt);
  if (opt.attention) bench_attention(*be, opt);
  return 0;
}
