// INT8 K/V cache stores on the GPU against the CPU backend's kv_store on the same F32 input:
// the plain store and the fused rope + store (rope(q), rope(k), kv_store in one launch) must
// write the CPU cache's bytes and per-(slot, head) scales bit for bit (same rule, and every
// step of it is exact or one IEEE rounding on both sides: rows.cu quantize_head_i8). Odd block
// sizes, several heads, head dims that are not multiples of 32, negative slots skipped, and
// rows that test the rule's corners (all zeros, rounding ties, tiny and huge magnitudes).
// Needs the CPU backend, so it is built only where ember_backend_cpu is (tests/cuda/CMakeLists.txt).
#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"

#include <algorithm>
#include <string>

namespace ember::cuda_test {
namespace {

Backend* cpu() {
  static std::unique_ptr<Backend> be = make_cpu_backend(1);
  return be.get();
}

// A K or V cache of both backends, started from the same bytes (int8 0x5a, scales NaN) so that
// slots nobody writes compare equal only if both left them alone.
struct I8Cache {
  int n_blocks, bs, heads, dim;
  std::vector<int8_t> host_q;
  std::vector<float> host_s;
  DevTensor dev_q, dev_s;
  I8Cache(int n_blocks_, int bs_, int heads_, int dim_) : n_blocks(n_blocks_), bs(bs_), heads(heads_), dim(dim_) {
    const size_t slots = static_cast<size_t>(n_blocks) * bs;
    host_q.assign(slots * heads * dim, 0x5a);
    host_s.resize(slots * heads);
    std::memset(host_s.data(), 0xff, host_s.size() * sizeof(float));
    dev_q = dev_tensor(DType::I8, {n_blocks, bs, heads, dim});
    dev_s = dev_tensor(DType::F32, {n_blocks, bs, heads});  // 0xff bytes, like host_s
    backend()->upload(dev_q.t.data, host_q.data(), host_q.size());
  }
  Tensor host_tensor() { return make_tensor(host_q.data(), DType::I8, {n_blocks, bs, heads, dim}); }
};

KvLayer host_layer(I8Cache& k, I8Cache& v) {
  return KvLayer{k.host_tensor(), v.host_tensor(), k.host_s.data(), v.host_s.data(), k.bs};
}
KvLayer dev_layer(I8Cache& k, I8Cache& v) {
  return KvLayer{k.dev_q.t, v.dev_q.t, k.dev_s.t.as<float>(), v.dev_s.t.as<float>(), k.bs};
}

// The GPU cache's bytes and scale bits against the CPU's.
void expect_same(I8Cache& c, const std::string& what) {
  std::vector<int8_t> q(c.host_q.size());
  std::vector<float> s(c.host_s.size());
  backend()->download(q.data(), c.dev_q.t.data, q.size());
  backend()->download(s.data(), c.dev_s.t.data, s.size() * sizeof(float));
  size_t bad_q = 0, bad_s = 0;
  for (size_t i = 0; i < q.size(); ++i)
    if (q[i] != c.host_q[i] && bad_q++ < 5)
      ADD_FAILURE() << what << ": element " << i << " (slot " << i / (c.heads * c.dim) << ") gpu " << int(q[i])
                    << " cpu " << int(c.host_q[i]);
  for (size_t i = 0; i < s.size(); ++i)
    if (std::memcmp(&s[i], &c.host_s[i], sizeof(float)) != 0 && bad_s++ < 5)
      ADD_FAILURE() << what << ": scale " << i << " gpu " << s[i] << " cpu " << c.host_s[i];
  EXPECT_EQ(bad_q, 0u) << what << ": int8 values that differ";
  EXPECT_EQ(bad_s, 0u) << what << ": scales that differ";
}

// Rows that exercise the rule: (token 0, head 0) all zeros; (1, last head) ties at a unit
// scale (max 127: x * inv lands on k + 0.5, rounded away from zero); (2, 0) tiny and
// (3, last) huge magnitudes (normal scales); (4, 0) one outlier over small values.
void special_rows(std::vector<float>& x, int n, int heads, int dim) {
  auto row = [&](int t, int h) { return x.data() + (static_cast<size_t>(t) * heads + h) * dim; };
  if (n > 0) std::fill(row(0, 0), row(0, 0) + dim, 0.0f);
  if (n > 1) {
    float* r = row(1, heads - 1);
    for (int i = 0; i < dim; ++i) r[i] = (i % 2 ? -1.0f : 1.0f) * (static_cast<float>(i % 100) + 0.5f);
    r[0] = 127.0f;
  }
  if (n > 2)
    for (int i = 0; i < dim; ++i) row(2, 0)[i] *= 1e-20f;
  if (n > 3)
    for (int i = 0; i < dim; ++i) row(3, heads - 1)[i] *= 1e30f;
  if (n > 4) {
    for (int i = 0; i < dim; ++i) row(4, 0)[i] *= 1e-3f;
    row(4, 0)[dim / 2] = -50.0f;
  }
}

// The test's restatement of the rule (quantize_i8_row, used by the attention tests) is the CPU's.
TEST(CudaKvInt8, TestRuleIsTheCpuRule) {
  const int n = 6, heads = 3, dim = 40, bs = 7, n_blocks = 1;
  auto x = random_floats(static_cast<size_t>(n) * heads * dim, 5, -2.0f, 2.0f);
  special_rows(x, n, heads, dim);
  std::vector<int8_t> kq(static_cast<size_t>(n_blocks) * bs * heads * dim), vq(kq.size());
  std::vector<float> ks(static_cast<size_t>(n_blocks) * bs * heads), vs(ks.size());
  KvLayer kv{make_tensor(kq.data(), DType::I8, {n_blocks, bs, heads, dim}),
             make_tensor(vq.data(), DType::I8, {n_blocks, bs, heads, dim}), ks.data(), vs.data(), bs};
  std::vector<int32_t> slots(n);
  for (int i = 0; i < n; ++i) slots[i] = i;
  Tensor t = make_tensor(x.data(), DType::F32, {n, heads, dim});
  cpu()->kv_store(kv, t, t, slots.data());
  std::vector<int8_t> q(static_cast<size_t>(dim));
  for (int r = 0; r < n * heads; ++r) {
    const float s = quantize_i8_row(x.data() + static_cast<size_t>(r) * dim, dim, q.data());
    EXPECT_EQ(std::memcmp(&s, &ks[r], sizeof(float)), 0) << "row " << r;
    EXPECT_TRUE(std::equal(q.begin(), q.end(), kq.begin() + static_cast<ptrdiff_t>(r) * dim)) << "row " << r;
  }
}

TEST(CudaKvInt8, StoreMatchesCpuBackend) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int n_blocks, bs, heads, dim;
  };
  for (const Shape sh : {Shape{5, 7, 3, 40}, Shape{4, 5, 8, 128}, Shape{3, 16, 2, 33}, Shape{7, 3, 5, 96}}) {
    const int n = 11;
    const std::vector<int32_t> all = {0, 17, -1, sh.n_blocks * sh.bs - 1, 9, 5, -1, 12, 2, -7, 1};
    std::vector<int32_t> slots;
    for (int32_t s : all) slots.push_back(s < 0 ? s : s % (sh.n_blocks * sh.bs));
    auto k = random_floats(static_cast<size_t>(n) * sh.heads * sh.dim, 20 + sh.dim, -3.0f, 3.0f);
    auto v = random_floats(k.size(), 21 + sh.dim, -0.5f, 0.5f);
    special_rows(k, n, sh.heads, sh.dim);
    special_rows(v, n, sh.heads, sh.dim);
    // (distinct slots: two tokens writing one slot would race on the GPU)
    std::vector<int32_t> sorted;
    for (int32_t s : slots)
      if (s >= 0) sorted.push_back(s);
    std::sort(sorted.begin(), sorted.end());
    ASSERT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
    I8Cache ck(sh.n_blocks, sh.bs, sh.heads, sh.dim), cv(sh.n_blocks, sh.bs, sh.heads, sh.dim);
    Tensor hk = make_tensor(k.data(), DType::F32, {n, sh.heads, sh.dim});
    Tensor hv = make_tensor(v.data(), DType::F32, {n, sh.heads, sh.dim});
    KvLayer host = host_layer(ck, cv);
    cpu()->kv_store(host, hk, hv, slots.data());
    DevTensor dk = dev_floats(k, {n, sh.heads, sh.dim}), dv = dev_floats(v, {n, sh.heads, sh.dim});
    KvLayer dev = dev_layer(ck, cv);
    backend()->kv_store(dev, dk.t, dv.t, slots.data());
    const std::string what = "blocks " + std::to_string(sh.n_blocks) + " x " + std::to_string(sh.bs) + ", " +
                             std::to_string(sh.heads) + " heads of " + std::to_string(sh.dim);
    expect_same(ck, what + " k");
    expect_same(cv, what + " v");
  }
}

// rope(q), rope(k), kv_store(k, v) with an INT8 cache: with the positions and slots in the
// step metadata the backend runs them as one launch (rows.cu rope_kv_store_kernel, whose INT8
// path reads each rotated k row back for its max), else apart (rope, then the plain store).
// Either way the cache must hold what the CPU's kv_store writes for the rotated k (downloaded
// from the GPU: the two backends' sin/cos differ in the last bits) and v. Shapes: k heads split
// over two blocks of the fused kernel (6 + 4 heads), the Llama-3-8B grouping (32 + 8 heads,
// one block of k heads, v heads over five), and GQA 1 at head_dim 96; odd block sizes.
TEST(CudaKvInt8, RopeAndStoreMatchCpuBackend) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int hq, hk, dim, bs;
    bool neox;
  };
  for (const Shape sh : {Shape{6, 4, 64, 7, false}, Shape{32, 8, 128, 16, true}, Shape{4, 4, 96, 5, true}}) {
    const int n = 5, n_blocks = 4;
    const std::vector<int32_t> pos = {7, 8, 2000, 0, 33};
    const std::vector<int32_t> slots = {5, -1, 9, sh.bs * n_blocks - 1, 0};
    std::vector<float> freq(sh.dim / 2);
    for (int i = 0; i < sh.dim / 2; ++i) freq[i] = std::pow(10000.0f, -2.0f * i / sh.dim);
    DevTensor dfreq = dev_floats(freq, {sh.dim / 2});
    for (bool registered : {false, true}) {
      const std::string what = std::to_string(sh.hq) + "/" + std::to_string(sh.hk) + " heads of " +
                               std::to_string(sh.dim) + (registered ? ", fused" : ", apart");
      auto q = random_floats(static_cast<size_t>(n) * sh.hq * sh.dim, 300 + registered, -2.0f, 2.0f);
      auto k = random_floats(static_cast<size_t>(n) * sh.hk * sh.dim, 302 + registered, -2.0f, 2.0f);
      auto v = random_floats(k.size(), 304 + registered, -2.0f, 2.0f);
      special_rows(k, n, sh.hk, sh.dim);
      special_rows(v, n, sh.hk, sh.dim);
      DevTensor dq = dev_floats(q, {n, sh.hq, sh.dim}), dk = dev_floats(k, {n, sh.hk, sh.dim}),
                dv = dev_floats(v, {n, sh.hk, sh.dim});
      I8Cache ck(n_blocks, sh.bs, sh.hk, sh.dim), cv(n_blocks, sh.bs, sh.hk, sh.dim);
      CudaStep* step = cuda_step(*backend());
      ASSERT_TRUE(step);
      if (registered)
        step->set_step_metadata({HostArray{pos.data(), pos.size() * 4}, HostArray{slots.data(), slots.size() * 4}});
      RopeParams p;
      p.head_dim = sh.dim;
      p.rotary_dim = sh.dim;
      p.neox = sh.neox;
      p.inv_freq = dfreq.t.as<float>();
      KvLayer dev = dev_layer(ck, cv);
      backend()->rope(dq.t, pos.data(), p);
      backend()->rope(dk.t, pos.data(), p);
      backend()->kv_store(dev, dk.t, dv.t, slots.data());
      auto rk = download_floats(dk.t);
      step->clear_step_metadata();
      // The rotation itself (loosely: CudaFusion checks it; here it proves k was rotated
      // before the store read it).
      double moved = 0.0;
      for (size_t i = 0; i < k.size(); ++i) moved += std::fabs(double(rk[i]) - k[i]);
      EXPECT_GT(moved, 1e-3) << what << ": k was not rotated";
      Tensor hk = make_tensor(rk.data(), DType::F32, {n, sh.hk, sh.dim});
      Tensor hv = make_tensor(v.data(), DType::F32, {n, sh.hk, sh.dim});
      KvLayer host = host_layer(ck, cv);
      cpu()->kv_store(host, hk, hv, slots.data());
      expect_same(ck, what + " k");
      expect_same(cv, what + " v");
    }
  }
}

}  // namespace
}  // namespace ember::cuda_test
