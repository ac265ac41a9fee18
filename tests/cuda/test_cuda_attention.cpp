// Paged attention on the GPU against a double-precision reference: decode (split-K, GQA
// packing), prefill (tiled, tensor cores) and the fallback kernel, on mixed batches of odd
// sequence lengths, odd block sizes, sliding windows and soft-capping.
#include "backend/cuda/attention.cuh"
#include "cuda_test_util.h"

#include <algorithm>
#include <cuda_runtime.h>
#include <numeric>

namespace ember::cuda_test {
namespace {

struct Seq {
  int n_new;
  int len;
};

struct AttnCase {
  int n_heads, n_kv, head_dim, block_size;
  DType kv;
  std::vector<Seq> seqs;
  int window = 0;
  float softcap = 0.0f;
  // > 0: each (slot, head) row of V is multiplied by 10^u, u uniform in [-spread, spread], and
  // each row of K by 10^(u' / 8) (rows of very different magnitudes: INT8 scales far apart;
  // K's milder, as scores that large make softmax weights hinge on Q's F16 rounding).
  float spread = 0.0f;
};

// -1: through Backend::attention (Auto); otherwise a forced kernel (and split count).
struct Run {
  int kind;  // cuda::AttnKernel value or -1
  int splits = 0;
  int stages = 0;
  int warps = 0;
  int keys = 0;  // PrefillWgmma: keys per tile
  int mode = -1;  // PrefillWgmma: PagedAttnArgs::prefill_mode
  bool keys_as_m = true;  // one-byte decode: PagedAttnArgs::decode_keys_as_m
};
using RunList = std::vector<Run>;  // (inside a TEST body, Run names testing::Test::Run)

class AttnProblem {
 public:
  AttnProblem(const AttnCase& c, uint32_t seed) : c_(c) {
    const int n_seqs = static_cast<int>(c.seqs.size());
    qs_.push_back(0);
    for (const auto& s : c.seqs) {
      qs_.push_back(qs_.back() + s.n_new);
      lens_.push_back(s.len);
      max_blocks_ = std::max(max_blocks_, (s.len + c.block_size - 1) / c.block_size);
    }
    n_tokens_ = qs_.back();
    int total_blocks = 0;
    for (const auto& s : c.seqs) total_blocks += (s.len + c.block_size - 1) / c.block_size;
    n_blocks_ = total_blocks + 3;  // spare blocks nobody reads
    std::vector<int32_t> perm(n_blocks_);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    tables_.assign(static_cast<size_t>(n_seqs) * max_blocks_, 0);
    int next = 0;
    for (int s = 0; s < n_seqs; ++s)
      for (int b = 0; b < (c.seqs[s].len + c.block_size - 1) / c.block_size; ++b)
        tables_[s * max_blocks_ + b] = perm[next++];
    const int64_t cache_elems = int64_t{n_blocks_} * c.block_size * c.n_kv * c.head_dim;
    k_ = random_floats(cache_elems, seed + 1);
    v_ = random_floats(cache_elems, seed + 2);
    if (c.spread > 0.0f) {
      const auto u = random_floats(2 * cache_elems / c.head_dim, seed + 4, -c.spread, c.spread);
      for (int64_t i = 0; i < cache_elems; ++i) {
        k_[i] *= std::pow(10.0f, u[2 * (i / c.head_dim)] / 8.0f);
        v_[i] *= std::pow(10.0f, u[2 * (i / c.head_dim) + 1]);
      }
    }
    for (auto& x : k_) x = round_to(c.kv, x);
    for (auto& x : v_) x = round_to(c.kv, x);
    q_ = random_floats(static_cast<size_t>(n_tokens_) * c.n_heads * c.head_dim, seed + 3, -4.0f, 4.0f);
    dk_ = dev_tensor(c.kv, {n_blocks_, c.block_size, c.n_kv, c.head_dim});
    dv_ = dev_tensor(c.kv, {n_blocks_, c.block_size, c.n_kv, c.head_dim});
    if (c.kv == DType::I8) {
      upload_i8(k_, dk_, dks_);
      upload_i8(v_, dv_, dvs_);
    } else {
      const auto kb = encode(c.kv, k_), vb = encode(c.kv, v_);
      backend()->upload(dk_.t.data, kb.data(), kb.size());
      backend()->upload(dv_.t.data, vb.data(), vb.size());
    }
    dq_ = dev_floats(q_, {n_tokens_, c.n_heads, c.head_dim});
    reference();
  }

  // Runs one kernel choice and returns the error against the reference.
  double run(const Run& r) {
    const auto& c = c_;
    DevTensor out = dev_tensor(DType::F32, {n_tokens_, c.n_heads, c.head_dim});
    KvLayer kv{dk_.t, dv_.t, scales(dks_), scales(dvs_), c.block_size};
    AttentionParams p;
    p.n_heads = c.n_heads;
    p.n_kv_heads = c.n_kv;
    p.head_dim = c.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    p.sliding_window = c.window;
    p.logit_softcap = c.softcap;
    const int n_seqs = static_cast<int>(c.seqs.size());
    if (r.kind < 0) {
      AttentionBatch b{n_seqs, qs_.data(), lens_.data(), tables_.data(), max_blocks_};
      backend()->attention(dq_.t, kv, b, p, out.t);
    } else {
      // Direct launch with device metadata, covering every sequence with one kernel.
      std::vector<int32_t> meta;
      meta.insert(meta.end(), qs_.begin(), qs_.end());
      meta.insert(meta.end(), lens_.begin(), lens_.end());
      meta.insert(meta.end(), tables_.begin(), tables_.end());
      for (int s = 0; s < n_seqs; ++s) meta.push_back(s);
      auto dm = backend()->alloc(meta.size() * sizeof(int32_t));
      backend()->upload(dm->data(), meta.data(), meta.size() * sizeof(int32_t));
      const auto* m = static_cast<const int32_t*>(dm->data());
      cuda::PagedAttnArgs a;
      a.q = dq_.t.as<float>();
      a.out = out.t.as<float>();
      a.k = dk_.t.data;
      a.v = dv_.t.data;
      a.kv_type = c.kv;
      a.k_scales = scales(dks_);
      a.v_scales = scales(dvs_);
      a.query_start = m;
      a.seq_lens = m + n_seqs + 1;
      a.block_tables = m + 2 * n_seqs + 1;
      a.seq_ids = a.block_tables + tables_.size();
      a.n_launch_seqs = n_seqs;
      a.max_blocks_per_seq = max_blocks_;
      a.block_size = c.block_size;
      a.n_heads = c.n_heads;
      a.n_kv_heads = c.n_kv;
      a.head_dim = c.head_dim;
      a.scale = p.scale;
      a.softcap = c.softcap;
      a.window = c.window;
      for (const auto& s : c.seqs) {
        a.max_new = std::max(a.max_new, s.n_new);
        a.max_kv = std::max(a.max_kv, s.len);
      }
      a.splits = r.splits;
      a.stages = r.stages;
      a.prefill_warps = r.warps;
      a.prefill_keys = r.keys;
      a.prefill_mode = r.mode;
      a.decode_keys_as_m = r.keys_as_m;
      a.wgmma = cuda::wgmma_prefill_available(0);
      int sms = 0;
      EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
      const auto kind = static_cast<cuda::AttnKernel>(r.kind);
      const size_t ws_bytes = cuda::attention_workspace_bytes(a, kind, sms);
      auto ws = backend()->alloc(std::max<size_t>(ws_bytes, 16));
      EXPECT_EQ(cuda::launch_paged_attention(a, kind, ws->data(), ws_bytes, sms, nullptr), cudaSuccess);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    last_ = download_floats(out.t);
    return rel_error(last_, ref_);
  }

  // Auto kernel's output on this problem against another problem's reference.
  double error_against(const AttnProblem& other) {
    run({-1});
    return rel_error(last_, other.ref_);
  }

 private:
  // An INT8 cache (AttnCase::kv I8): x's (slot, head) rows quantized by the CPU cache's rule
  // (quantize_i8_row) into cache, their scales into scales; x becomes what the CPU reads back
  // (scale * q), so the reference is over the stored values.
  void upload_i8(std::vector<float>& x, DevTensor& cache, DevTensor& scales) {
    const int D = c_.head_dim;
    const size_t rows = x.size() / static_cast<size_t>(D);
    std::vector<int8_t> q(x.size());
    std::vector<float> s(rows);
    for (size_t r = 0; r < rows; ++r) {
      s[r] = quantize_i8_row(x.data() + r * D, D, q.data() + r * D);
      for (int i = 0; i < D; ++i) x[r * D + i] = s[r] * static_cast<float>(q[r * D + i]);
    }
    backend()->upload(cache.t.data, q.data(), q.size());
    scales = dev_floats(s, {n_blocks_, c_.block_size, c_.n_kv});
  }
  static float* scales(const DevTensor& t) { return t.buf ? t.t.as<float>() : nullptr; }

  void reference() {
    const auto& c = c_;
    const int G = c.n_heads / c.n_kv, D = c.head_dim;
    const double scale = 1.0 / std::sqrt(static_cast<double>(static_cast<float>(D)));
    ref_.assign(q_.size(), 0.0);
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      const int n_new = c.seqs[s].n_new, len = c.seqs[s].len;
      for (int j = 0; j < n_new; ++j) {
        const int pos = len - n_new + j;
        const int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
        for (int h = 0; h < c.n_heads; ++h) {
          const float* q = q_.data() + (static_cast<size_t>(qs_[s] + j) * c.n_heads + h) * D;
          std::vector<double> sc;
          std::vector<size_t> rows;
          for (int key = lo; key <= pos; ++key) {
            const size_t slot = static_cast<size_t>(tables_[s * max_blocks_ + key / c.block_size]) * c.block_size +
                                key % c.block_size;
            const size_t off = (slot * c.n_kv + h / G) * D;
            double d = 0.0;
            for (int i = 0; i < D; ++i) d += double(q[i]) * k_[off + i];
            d *= static_cast<float>(scale);
            if (c.softcap > 0.0f) d = c.softcap * std::tanh(d / c.softcap);
            sc.push_back(d);
            rows.push_back(off);
          }
          const double mx = *std::max_element(sc.begin(), sc.end());
          double sum = 0.0;
          for (auto& x : sc) sum += (x = std::exp(x - mx));
          double* o = ref_.data() + (static_cast<size_t>(qs_[s] + j) * c.n_heads + h) * D;
          for (size_t t = 0; t < sc.size(); ++t)
            for (int i = 0; i < D; ++i) o[i] += sc[t] / sum * v_[rows[t] + i];
        }
      }
    }
  }

  AttnCase c_;
  std::vector<int32_t> qs_, lens_, tables_;
  int max_blocks_ = 0, n_blocks_ = 0, n_tokens_ = 0;
  std::vector<float> q_, k_, v_;
  std::vector<double> ref_;
  std::vector<float> last_;
  DevTensor dk_, dv_, dq_;
  DevTensor dks_, dvs_;  // I8 only: per-(slot, head) scales
};

constexpr int kAuto = -1;
constexpr int kDecode = static_cast<int>(cuda::AttnKernel::Decode);
constexpr int kPrefill = static_cast<int>(cuda::AttnKernel::Prefill);
constexpr int kSimple = static_cast<int>(cuda::AttnKernel::Simple);
constexpr int kWgmma = static_cast<int>(cuda::AttnKernel::PrefillWgmma);

double tolerance(const AttnCase& c, int kind) {
  // Tensor cores: the mma.sync kernels, or (head_dim 256) the wgmma one where the device runs it.
  const bool mma = kind != kSimple && (cuda::attention_mma_supported(c.kv, c.head_dim) ||
                                       (cuda::attention_wgmma_supported(c.kv, c.head_dim) &&
                                        cuda::wgmma_prefill_available(0)));
  if (!mma) return 1e-5;                   // F32 math on the stored values
  // Q and P rounded to BF16 / F16 for the MMAs (FP8 K/V is widened to F16 exactly; the
  // reference reads the same FP8 values, as the CPU backend does).
  return c.kv == DType::BF16 ? 1.5e-2 : 3e-3;
}

void check(const AttnCase& c, const std::vector<Run>& runs, uint32_t seed) {
  AttnProblem prob(c, seed);
  for (const auto& r : runs) {
    const double err = prob.run(r);
    EXPECT_LT(err, tolerance(c, r.kind)) << "kind " << r.kind << " splits " << r.splits << " stages "
                                         << r.stages << " warps " << r.warps << " keys " << r.keys << " mode " << r.mode
                                         << " keys_as_m " << r.keys_as_m << " kv "
                                         << dtype_name(c.kv) << " D " << c.head_dim;
  }
}

TEST(CudaAttention, DecodeBatchSplitK) {
  SKIP_WITHOUT_GPU();
  AttnCase c{8, 2, 128, 16, DType::BF16, {{1, 1}, {1, 17}, {1, 300}, {1, 777}, {1, 1500}}};
  check(c, {{kAuto}, {kDecode}, {kDecode, 1}, {kDecode, 3}, {kDecode, 0, 3}, {kDecode, 5, 3}, {kSimple},
            {kPrefill}}, 1);
}

TEST(CudaAttention, MixedBatchF16Dim64) {
  SKIP_WITHOUT_GPU();
  AttnCase c{8, 2, 64, 16, DType::F16, {{3, 40}, {1, 64}, {37, 37}, {150, 421}, {4, 1000}}};
  check(c, {{kAuto}, {kDecode}, {kDecode, 0, 3}, {kPrefill}, {kPrefill, 0, 2, 4}, {kPrefill, 0, 2, 8},
            {kSimple}}, 2);
}

TEST(CudaAttention, SlidingWindowAndSoftcap) {
  SKIP_WITHOUT_GPU();
  AttnCase c{8, 2, 128, 16, DType::BF16, {{3, 40}, {1, 64}, {37, 37}, {150, 421}, {4, 1000}}, 100, 30.0f};
  check(c, {{kAuto}, {kDecode}, {kDecode, 5}, {kDecode, 2, 3}, {kPrefill}, {kPrefill, 0, 2, 4},
            {kSimple}}, 3);
}

TEST(CudaAttention, MultiHeadOddBlockSize) {
  SKIP_WITHOUT_GPU();
  AttnCase c{4, 4, 64, 7, DType::BF16, {{1, 50}, {70, 70}, {2, 130}}};
  check(c, {{kAuto}, {kDecode}, {kDecode, 0, 3}, {kPrefill}, {kPrefill, 0, 2, 4}, {kSimple}}, 4);
}

TEST(CudaAttention, GroupOf8F16) {
  SKIP_WITHOUT_GPU();
  AttnCase c{16, 2, 128, 32, DType::F16, {{2, 600}, {1, 33}, {65, 65}}};
  check(c, {{kAuto}, {kDecode}, {kPrefill}, {kPrefill, 0, 2, 4}}, 5);
}

TEST(CudaAttention, FallbackF32AndOddHeadDim) {
  SKIP_WITHOUT_GPU();
  for (DType kv : {DType::F32, DType::BF16}) {
    AttnCase c{6, 3, 96, 16, kv, {{1, 100}, {20, 50}}};
    check(c, {{kAuto}, {kSimple}}, 6);
  }
}

// The wgmma prefill kernels (sm_90a, compute capability 9.0), block-synced and warp-specialized
// (2 or 3 consumer warpgroups, attending tile by tile or overlapping softmax and P V), at both
// key-tile sizes: mixed
// batches whose decode rows it also takes, GQA 1 / 4 / 8, odd block sizes 7 and 33, window +
// soft-cap, both head dims and 16-bit types, prompts longer than a 128-row tile and chunks
// whose keys reach back past their first row. Auto (through the backend) picks it on such a
// device, so the other tests cover it there too.
TEST(CudaAttention, WgmmaPrefill) {
  SKIP_WITHOUT_GPU();
  if (!cuda::wgmma_prefill_available(0)) GTEST_SKIP() << "needs an sm_90a build on a compute capability 9.0 GPU";
  const RunList runs = {{kAuto},
                        {kWgmma, 0, 0, 0, 64, 0},
                        {kWgmma, 0, 0, 0, 128, 0},
                        {kWgmma, 0, 0, 0, 64, 1},
                        {kWgmma, 0, 0, 0, 128, 1},
                        {kWgmma, 0, 0, 0, 64, 2},
                        {kWgmma, 0, 0, 0, 64, 3},
                        {kWgmma, 0, 0, 0, 128, 3},
                        {kWgmma, 0, 0, 0, 64, 4},
                        {kPrefill}};
  check(AttnCase{8, 2, 128, 16, DType::BF16, {{3, 40}, {1, 64}, {37, 37}, {150, 421}, {4, 1000}, {300, 300}}}, runs, 41);
  check(AttnCase{8, 2, 64, 16, DType::F16, {{3, 40}, {1, 64}, {37, 37}, {150, 421}, {4, 1000}, {129, 700}}}, runs, 42);
  check(AttnCase{8, 2, 128, 16, DType::BF16, {{3, 40}, {37, 37}, {150, 421}, {200, 1000}}, 100, 30.0f}, runs, 43);
  check(AttnCase{8, 2, 64, 7, DType::F16, {{70, 70}, {150, 421}}, 50}, runs, 44);
  check(AttnCase{4, 4, 64, 7, DType::BF16, {{1, 50}, {70, 70}, {2, 130}, {257, 257}}}, runs, 45);
  check(AttnCase{16, 2, 128, 33, DType::F16, {{2, 600}, {1, 33}, {65, 65}, {300, 301}}, 0, 20.0f}, runs, 46);
  check(AttnCase{32, 8, 128, 16, DType::BF16, {{512, 512}, {100, 1100}}}, runs, 47);
}

// FP8 K/V (e4m3, e5m2) on the warp-specialized wgmma kernels (tile by tile and overlapping,
// 2 and 3 consumers), whose producer widens each landed tile to F16 (exact) in the swizzled
// stage: both tile sizes, mixed batches, GQA 1 / 4 / 8, odd block sizes, window + soft-cap,
// both head dims (Auto takes it through the backend).
TEST(CudaAttention, WgmmaPrefillFp8Kv) {
  SKIP_WITHOUT_GPU();
  if (!cuda::wgmma_prefill_available(0)) GTEST_SKIP() << "needs an sm_90a build on a compute capability 9.0 GPU";
  const RunList runs = {{kAuto},
                        {kWgmma, 0, 0, 0, 64, 1},
                        {kWgmma, 0, 0, 0, 128, 1},
                        {kWgmma, 0, 0, 0, 128, 3},
                        {kWgmma, 0, 0, 0, 64, 3},
                        {kWgmma, 0, 0, 0, 64, 4},
                        {kPrefill}};
  for (DType kv : {DType::FP8_E4M3, DType::FP8_E5M2}) {
    check(AttnCase{8, 2, 128, 16, kv, {{3, 40}, {1, 64}, {37, 37}, {150, 421}, {4, 1000}, {300, 300}}}, runs, 51);
    check(AttnCase{8, 2, 64, 7, kv, {{70, 70}, {150, 421}, {129, 700}}, 50, 30.0f}, runs, 52);
    check(AttnCase{4, 4, 64, 16, kv, {{1, 50}, {70, 70}, {257, 257}}}, runs, 53);
    check(AttnCase{16, 2, 128, 33, kv, {{2, 600}, {65, 65}, {300, 301}}}, runs, 54);
  }
}

// INT8 K/V on the warp-specialized wgmma kernels (64-key tiles; 2 consumers tile by tile, 3
// overlapping): the producer widens each landed tile to F16 times the scales that the key's
// chunk-0 thread copied (three scale buffers, a producer barrier per tile); mixed batches,
// GQA 1 / 4 / 8, odd block sizes, window + soft-cap, both head dims, V rows whose scales span
// 10^4-10^6.
TEST(CudaAttention, WgmmaPrefillInt8Kv) {
  SKIP_WITHOUT_GPU();
  if (!cuda::wgmma_prefill_available(0)) GTEST_SKIP() << "needs an sm_90a build on a compute capability 9.0 GPU";
  const RunList runs = {{kAuto}, {kWgmma}, {kWgmma, 0, 0, 0, 64, 1}, {kWgmma, 0, 0, 0, 64, 4}, {kPrefill}};
  check(AttnCase{8, 2, 128, 16, DType::I8, {{3, 40}, {1, 64}, {37, 37}, {150, 421}, {4, 1000}, {300, 300}}}, runs, 61);
  check(AttnCase{8, 2, 64, 7, DType::I8, {{70, 70}, {150, 421}, {129, 700}}, 50, 30.0f}, runs, 62);
  check(AttnCase{4, 4, 64, 16, DType::I8, {{1, 50}, {70, 70}, {257, 257}}, 0, 0.0f, 3.0f}, runs, 63);
  check(AttnCase{16, 2, 128, 33, DType::I8, {{2, 600}, {65, 65}, {300, 301}}, 0, 0.0f, 2.0f}, runs, 64);
  check(AttnCase{32, 8, 128, 16, DType::I8, {{512, 512}, {100, 1100}}}, runs, 65);
}

// head_dim 256 (Gemma): no mma.sync kernel; the wgmma kernels with 64-key tiles (block-synced,
// and two consumers overlapping softmax and P V with K and V on their own barriers) take every
// row count, decode rows included (Auto picks the default through the backend).
TEST(CudaAttention, WgmmaHeadDim256) {
  SKIP_WITHOUT_GPU();
  if (!cuda::wgmma_prefill_available(0)) GTEST_SKIP() << "needs an sm_90a build on a compute capability 9.0 GPU";
  const RunList runs = {{kAuto}, {kWgmma, 0, 0, 0, 64, 0}, {kWgmma, 0, 0, 0, 64, 3}, {kSimple}};
  check(AttnCase{8, 2, 256, 16, DType::BF16, {{1, 1}, {1, 300}, {3, 40}, {150, 421}, {4, 1000}, {200, 200}}}, runs, 48);
  check(AttnCase{4, 1, 256, 7, DType::F16, {{1, 77}, {70, 70}, {129, 500}}, 64, 50.0f}, runs, 49);
  // Decode rows alone: split over the key range (attn_merge_kernel merges), forced counts
  // (one past the keys of the short sequences: empty partials) and unsplit.
  const RunList decode_runs = {{kAuto},
                               {kWgmma, 0, 0, 0, 64, 3},
                               {kWgmma, 1, 0, 0, 64, 3},
                               {kWgmma, 7, 0, 0, 64, 3},
                               {kWgmma, 3, 0, 0, 64, 0},
                               {kSimple}};
  check(AttnCase{8, 2, 256, 16, DType::BF16, {{1, 1}, {1, 300}, {1, 1000}, {1, 77}}}, decode_runs, 50);
  check(AttnCase{8, 1, 256, 16, DType::BF16, {{2, 2000}, {1, 64}, {2, 129}}}, decode_runs, 51);
  check(AttnCase{4, 1, 256, 7, DType::F16, {{1, 700}, {1, 129}, {3, 64}}, 64, 50.0f}, decode_runs, 52);
  // One-byte K/V (e4m3, e5m2, INT8 with its scales): the overlapping kernel whose producer
  // widens one raw tile at a time; mixed batches, window + soft-cap, decode rows split.
  const RunList byte_runs = {{kAuto}, {kWgmma, 0, 0, 0, 64, 3}, {kSimple}};
  const RunList byte_decode_runs = {{kAuto}, {kWgmma, 0, 0, 0, 64, 3}, {kWgmma, 5, 0, 0, 64, 3}, {kSimple}};
  for (DType kv : {DType::FP8_E4M3, DType::FP8_E5M2, DType::I8}) {
    check(AttnCase{8, 2, 256, 16, kv, {{1, 1}, {1, 300}, {3, 40}, {150, 421}, {4, 1000}, {200, 200}}}, byte_runs, 53);
    check(AttnCase{4, 1, 256, 7, kv, {{1, 77}, {70, 70}, {129, 500}}, 64, 50.0f}, byte_runs, 54);
    check(AttnCase{8, 2, 256, 16, kv, {{1, 1000}, {1, 77}, {1, 129}}}, byte_decode_runs, 55);
  }
}

// FP8 K/V (e4m3, e5m2; unit scale as the CPU cache stores it without scales): every kernel on
// mixed batches against the reference over the decoded FP8 values (what the CPU backend's
// attention computes), odd block sizes, GQA 1/4/8, window + soft-cap, both head dims.
TEST(CudaAttention, Fp8KvAllKernels) {
  SKIP_WITHOUT_GPU();
  for (DType kv : {DType::FP8_E4M3, DType::FP8_E5M2}) {
    check(AttnCase{8, 2, 128, 16, kv, {{1, 1}, {1, 17}, {1, 300}, {1, 777}, {1, 1500}}},
          {{kAuto}, {kDecode}, {kDecode, 1}, {kDecode, 3}, {kDecode, 0, 3}, {kDecode, 5, 2}, {kSimple}, {kPrefill}},
          11);
    check(AttnCase{8, 2, 64, 16, kv, {{3, 40}, {1, 64}, {37, 37}, {150, 421}, {4, 1000}}},
          {{kAuto}, {kDecode}, {kDecode, 0, 2}, {kPrefill}, {kPrefill, 0, 2, 4}, {kPrefill, 0, 2, 8}, {kSimple}}, 12);
    check(AttnCase{8, 2, 128, 16, kv, {{3, 40}, {1, 64}, {37, 37}, {150, 421}, {4, 1000}}, 100, 30.0f},
          {{kAuto}, {kDecode}, {kDecode, 5}, {kPrefill}, {kPrefill, 0, 2, 4}, {kSimple}}, 13);
    check(AttnCase{4, 4, 64, 7, kv, {{1, 50}, {70, 70}, {2, 130}}},
          {{kAuto}, {kDecode}, {kDecode, 0, 3}, {kPrefill}, {kPrefill, 0, 2, 4}, {kSimple}}, 14);
    check(AttnCase{16, 2, 128, 32, kv, {{2, 600}, {1, 33}, {65, 65}, {300, 301}}},
          {{kAuto}, {kDecode}, {kPrefill}, {kPrefill, 0, 2, 4}}, 15);
    check(AttnCase{6, 3, 96, 16, kv, {{1, 100}, {20, 50}}}, {{kAuto}, {kSimple}}, 16);
  }
}

// The FP8 decode kernel (fragments straight from the fp8 bytes, permuted head dims and output
// columns) at every stage count it builds: Llama-3 shapes (GQA 4) with key ranges around tile
// edges and speculative rows, GQA 1 with block size 7 at head dim 64, GQA 8 with window +
// soft-cap, decode forced onto rows that need several row tiles, and explicit split counts.
TEST(CudaAttention, Fp8DecodeStagesAndShapes) {
  SKIP_WITHOUT_GPU();
  for (DType kv : {DType::FP8_E4M3, DType::FP8_E5M2}) {
    check(AttnCase{32, 8, 128, 16, kv, {{1, 1}, {1, 63}, {1, 64}, {1, 65}, {1, 1100}, {2, 700}, {4, 2049}}},
          {{kAuto}, {kDecode, 0, 2}, {kDecode, 0, 3}, {kDecode, 0, 4}, {kDecode, 0, 6}, {kDecode, 1, 4},
           {kDecode, 7, 6}, {kDecode, 2, 2}},
          31);
    check(AttnCase{4, 4, 64, 7, kv, {{1, 50}, {3, 130}, {1, 1}, {5, 333}}},
          {{kAuto}, {kDecode, 0, 2}, {kDecode, 0, 3}, {kDecode, 0, 4}, {kDecode, 0, 6}, {kDecode, 3, 4}}, 32);
    check(AttnCase{16, 2, 128, 32, kv, {{2, 600}, {1, 33}, {1, 1000}}, 100, 30.0f},
          {{kAuto}, {kDecode, 0, 4}, {kDecode, 0, 6}, {kDecode, 4, 3}, {kDecode, 2, 2}}, 33);
    check(AttnCase{8, 2, 128, 16, kv, {{9, 300}, {1, 5}}}, {{kDecode, 0, 4}, {kDecode, 3, 6}, {kDecode, 1, 2}}, 34);
    check(AttnCase{8, 1, 64, 16, kv, {{1, 200}, {1, 4000}}, 256},
          {{kAuto}, {kDecode, 0, 4}, {kDecode, 0, 6}, {kDecode, 5, 3}}, 35);
    // 4096 keys and more: the default moves to 6 stages.
    check(AttnCase{32, 8, 128, 16, kv, {{1, 4100}, {1, 37}, {3, 4500}}}, {{kAuto}, {kDecode}, {kDecode, 2}}, 36);
  }
}

// The one-byte decode launch on the 16-row kernel (decode_keys_as_m false).
Run decode_16_rows() {
  Run r{kDecode};
  r.keys_as_m = false;
  return r;
}

// The one-byte decode kernel with keys as the MMA rows (launches of <= 8 packed rows a sequence:
// one token with GQA groups up to 8, 2 tokens of GQA 4 or up to 4 of GQA 2: rows of different
// positions) at every stage count it builds and forced split counts: Llama-3 shapes around tile
// edges, GQA 1 with block size 7 at head dim 64, GQA 8 with window + soft-cap, 4100-4500 keys,
// and (INT8) rows whose scales lie 10^6 apart; the 16-row kernel on the same problems beside it.
TEST(CudaAttention, ByteDecodeKeysAsM) {
  SKIP_WITHOUT_GPU();
  cuda::PagedAttnArgs a;  // which launches take it
  a.n_heads = 32;
  a.n_kv_heads = 8;
  a.head_dim = 128;
  a.kv_type = DType::FP8_E4M3;
  a.max_new = 2;
  EXPECT_TRUE(cuda::attention_decode_keys_as_m(a));
  a.max_new = 3;  // 12 rows
  EXPECT_FALSE(cuda::attention_decode_keys_as_m(a));
  a.max_new = 1;
  a.decode_keys_as_m = false;
  EXPECT_FALSE(cuda::attention_decode_keys_as_m(a));
  a.decode_keys_as_m = true;
  a.kv_type = DType::BF16;
  EXPECT_FALSE(cuda::attention_decode_keys_as_m(a));
  const auto rows16 = decode_16_rows();
  for (DType kv : {DType::FP8_E4M3, DType::FP8_E5M2, DType::I8}) {
    const float spread = kv == DType::I8 ? 3.0f : 0.0f;
    check(AttnCase{32, 8, 128, 16, kv, {{1, 1}, {1, 63}, {1, 64}, {1, 65}, {1, 1100}, {2, 700}, {1, 2049}}, 0, 0.0f,
                   spread},
          {{kAuto}, {kDecode, 0, 2}, {kDecode, 0, 3}, {kDecode, 0, 4}, {kDecode, 0, 6}, {kDecode, 1, 4},
           {kDecode, 7, 6}, {kDecode, 2, 2}, rows16},
          71);
    check(AttnCase{4, 4, 64, 7, kv, {{1, 50}, {1, 130}, {1, 1}, {1, 333}}, 0, 0.0f, spread},
          {{kAuto}, {kDecode, 0, 2}, {kDecode, 0, 3}, {kDecode, 0, 4}, {kDecode, 0, 6}, {kDecode, 3, 4}, rows16}, 72);
    check(AttnCase{16, 2, 128, 32, kv, {{1, 600}, {1, 33}, {1, 1000}}, 100, 30.0f, spread},
          {{kAuto}, {kDecode, 0, 4}, {kDecode, 0, 6}, {kDecode, 4, 3}, {kDecode, 2, 2}, rows16}, 73);
    check(AttnCase{8, 4, 128, 16, kv, {{4, 300}, {1, 5}, {3, 77}}, 0, 0.0f, spread},
          {{kAuto}, {kDecode, 0, 4}, {kDecode, 3, 6}, {kDecode, 1, 2}, rows16}, 74);
    check(AttnCase{8, 1, 64, 16, kv, {{1, 200}, {1, 4000}}, 256, 0.0f, spread},
          {{kAuto}, {kDecode, 0, 4}, {kDecode, 0, 6}, {kDecode, 5, 3}, rows16}, 75);
    check(AttnCase{32, 8, 128, 16, kv, {{1, 4100}, {1, 37}, {2, 4500}}, 0, 0.0f, spread},
          {{kAuto}, {kDecode}, {kDecode, 2}, rows16}, 76);
  }
}

// The decode launch's longest-first order (launch_longest_first) is the stable sort by length,
// ties in index order; and a whole-batch decode of more (sequence, kv head) blocks than the
// SMs, which Backend::attention starts longest first on the keys-as-M kernel, matches the
// reference (FP8 and INT8 K/V; lengths 1-900 with repeats).
TEST(CudaAttention, DecodeLongestFirst) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(77);
  for (int n : {1, 2, 7, 300, cuda::kMaxLongestFirst}) {
    std::vector<int32_t> lens(static_cast<size_t>(n));
    std::uniform_int_distribution<int> len(1, n < 100 ? 3 : 900);  // short lists: ties
    for (auto& x : lens) x = len(rng);
    std::vector<int32_t> want(lens.size());
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int32_t x, int32_t y) { return lens[x] > lens[y]; });
    auto dl = backend()->alloc(lens.size() * sizeof(int32_t));
    auto dord = backend()->alloc(lens.size() * sizeof(int32_t));
    backend()->upload(dl->data(), lens.data(), lens.size() * sizeof(int32_t));
    ASSERT_EQ(cuda::launch_longest_first(static_cast<const int32_t*>(dl->data()), n,
                                         static_cast<int32_t*>(dord->data()), nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int32_t> got(lens.size());
    backend()->download(got.data(), dord->data(), got.size() * sizeof(int32_t));
    EXPECT_EQ(got, want) << "n " << n;
  }
  EXPECT_EQ(cuda::launch_longest_first(nullptr, cuda::kMaxLongestFirst + 1, nullptr, nullptr), cudaErrorInvalidValue);
  std::vector<Seq> seqs;
  std::uniform_int_distribution<int> len(1, 900);
  for (int i = 0; i < 48; ++i) seqs.push_back({1, i % 5 == 0 ? 333 : len(rng)});
  for (DType kv : {DType::FP8_E4M3, DType::I8}) check(AttnCase{32, 8, 128, 16, kv, seqs}, {{kAuto}}, 77);
}

// The FP8 cache against the unquantized one: the error is the format's (e4m3 3 mantissa bits,
// e5m2 2), not more. Values of +-1 quantize to <= 2^-4 (e4m3) / 2^-3 (e5m2) relative error.
TEST(CudaAttention, Fp8KvErrorWithinFormat) {
  SKIP_WITHOUT_GPU();
  for (DType kv : {DType::FP8_E4M3, DType::FP8_E5M2}) {
    AttnCase c{8, 2, 128, 16, kv, {{1, 900}, {5, 333}, {100, 257}}};
    AttnCase exact = c;
    exact.kv = DType::F32;
    AttnProblem fp8(c, 21), f32(exact, 21);  // same seed: same K/V/Q before rounding
    const double err = fp8.error_against(f32);
    EXPECT_LT(err, kv == DType::FP8_E4M3 ? 0.05 : 0.1) << dtype_name(kv);
    EXPECT_GT(err, 1e-4) << dtype_name(kv) << ": suspiciously exact for an FP8 cache";
  }
}

// INT8 K/V with per-(slot, head) scales (the CPU cache's format, quantized by its rule) on every
// kernel that reads it: the one-byte decode kernel (integers in the MMAs; K scales on the
// scores, V scales on P against a growing per-warp reference) at each stage count and split,
// the mma.sync prefill (tiles widened to F16 times their scales) and the fallback, against the
// reference over the dequantized values: mixed decode / speculative / prefill batches, GQA 1,
// 2, 4 and 8, odd block sizes, window + soft-cap, and V rows whose magnitudes (so scales) span
// 10^4 or 10^6. head_dim 96 has only the fallback. Then the INT8 cache against the unquantized
// one: the format's error (an absmax step of 1/127), not more.
TEST(CudaAttention, Int8KvAllKernels) {
  SKIP_WITHOUT_GPU();
  EXPECT_TRUE(cuda::cuda_kv_dtype_supported(DType::I8));
  for (int d : {64, 128}) {
    EXPECT_TRUE(cuda::attention_mma_supported(DType::I8, d)) << d;
    EXPECT_TRUE(cuda::attention_wgmma_supported(DType::I8, d)) << d;
  }
  EXPECT_TRUE(cuda::attention_wgmma_supported(DType::I8, 256));  // (WgmmaHeadDim256 runs it)
  EXPECT_FALSE(cuda::attention_wgmma_supported(DType::I8, 96));
  EXPECT_FALSE(cuda::attention_mma_supported(DType::I8, 96));
  const RunList all = {{kAuto},         {kSimple},      {kDecode},         {kDecode, 1},      {kDecode, 3},
                       {kDecode, 0, 2}, {kDecode, 0, 4}, {kDecode, 5, 6},  {kPrefill},        {kPrefill, 0, 2, 4}};
  check(AttnCase{8, 2, 128, 16, DType::I8, {{1, 1}, {1, 17}, {3, 300}, {37, 37}, {150, 421}, {1, 1000}}}, all, 51);
  check(AttnCase{4, 4, 64, 7, DType::I8, {{1, 50}, {70, 70}, {2, 130}, {4, 333}}}, all, 52);
  check(AttnCase{8, 2, 128, 7, DType::I8, {{3, 40}, {1, 64}, {37, 37}, {150, 421}, {4, 1000}}, 100, 30.0f}, all, 53);
  check(AttnCase{4, 4, 64, 13, DType::I8, {{1, 300}, {20, 200}, {90, 90}}, 50, 20.0f}, all, 54);
  check(AttnCase{32, 8, 128, 16, DType::I8, {{1, 1}, {1, 63}, {1, 65}, {1, 1100}, {2, 700}, {4, 2049}}},
        {{kAuto}, {kDecode, 0, 2}, {kDecode, 0, 3}, {kDecode, 0, 4}, {kDecode, 0, 6}, {kDecode, 7, 6}}, 58);
  check(AttnCase{16, 2, 128, 32, DType::I8, {{2, 600}, {1, 33}, {65, 65}, {300, 301}}, 0, 0.0f, 2.0f}, all, 59);
  check(AttnCase{8, 1, 64, 16, DType::I8, {{1, 200}, {1, 4000}, {40, 90}}, 256, 0.0f, 3.0f}, all, 60);
  check(AttnCase{6, 6, 96, 5, DType::I8, {{1, 100}, {20, 50}, {64, 64}}}, {{kAuto}, {kSimple}}, 55);
  check(AttnCase{12, 3, 96, 16, DType::I8, {{1, 100}, {20, 50}, {2, 77}}, 30, 30.0f}, {{kAuto}, {kSimple}}, 56);
  AttnCase c{8, 2, 128, 16, DType::I8, {{1, 900}, {5, 333}, {100, 257}}};
  AttnCase exact = c;
  exact.kv = DType::F32;
  AttnProblem i8(c, 57), f32(exact, 57);  // same seed: same K/V/Q before quantizing
  const double err = i8.error_against(f32);
  EXPECT_LT(err, 0.02);
  EXPECT_GT(err, 1e-4) << "suspiciously exact for an INT8 cache";
}

}  // namespace
}  // namespace ember::cuda_test
