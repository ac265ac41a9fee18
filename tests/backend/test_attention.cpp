// kv_store + attention over the paged cache against a double-precision reference: several
// sequences with different lengths and chunk sizes (decode, prefill, chunked prefill),
// shuffled (non-contiguous) block tables, GQA ratios 1/2/4/8 and MQA, sliding windows,
// logit softcap, and every cache dtype. Unused cache slots hold NaN, so a read of a slot the
// query must not see poisons the output.
#include "quant/fp8.h"
#include "test_util.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace ember::test {
namespace {

struct SeqSpec {
  int len;    // K/V length after this step
  int n_new;  // query tokens this step
};

struct AttnCase {
  int n_heads, n_kv_heads, head_dim;
  int window = 0;
  float softcap = 0.0f;
  DType cache = DType::F32;
  std::vector<SeqSpec> seqs;
};

// The value the cache returns for x, computed independently of the backend's codec.
std::vector<float> round_trip(DType t, const float* x, int n) {
  std::vector<float> r(x, x + n);
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  for (int i = 0; i < n; ++i) {
    switch (t) {
      case DType::F16: r[i] = f16_to_f32(f32_to_f16(x[i])); break;
      case DType::BF16: r[i] = bf16_to_f32(f32_to_bf16(x[i])); break;
      case DType::I8: {
        const float s = amax / 127.0f;
        r[i] = s * static_cast<float>(std::lround(x[i] / s));
        break;
      }
      case DType::FP8_E4M3: {
        const float s = amax / 448.0f;
        r[i] = s * quant::fp8_e4m3_to_f32(quant::f32_to_fp8_e4m3(x[i] * (1.0f / s)));
        break;
      }
      default: break;
    }
  }
  return r;
}

std::vector<uint8_t> poisoned_cache(DType t, size_t n_elems) {
  const size_t es = dtype_block_bytes(t);
  std::vector<uint8_t> c(n_elems * es, 0);
  for (size_t i = 0; i < n_elems; ++i) {
    if (t == DType::F32) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(c.data() + 4 * i, &nan, 4);
    } else if (t == DType::F16 || t == DType::BF16) {
      const uint16_t nan = t == DType::F16 ? 0x7e00 : 0x7fc0;
      std::memcpy(c.data() + 2 * i, &nan, 2);
    } else if (t == DType::FP8_E4M3) {
      c[i] = 0x7f;  // NaN
    }
  }
  return c;
}

void run_attention_case(Backend& be, const AttnCase& c, uint64_t seed) {
  SCOPED_TRACE(fmt::format("heads {}/{} dim {} window {} softcap {} cache {}", c.n_heads, c.n_kv_heads, c.head_dim,
                           c.window, c.softcap, dtype_name(c.cache)));
  Rng rng(seed);
  const int bs = 16, D = c.head_dim, KH = c.n_kv_heads, H = c.n_heads, G = H / KH;
  const int n_seqs = static_cast<int>(c.seqs.size());
  int max_blocks = 0, total_blocks = 0;
  for (auto& s : c.seqs) {
    max_blocks = std::max(max_blocks, (s.len + bs - 1) / bs + 1);
    total_blocks += (s.len + bs - 1) / bs;
  }
  const int n_blocks = total_blocks + 5;
  std::vector<int32_t> ids(n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng.gen());
  std::vector<int32_t> tables(static_cast<size_t>(n_seqs * max_blocks), 0);
  int next_id = 0;
  for (int s = 0; s < n_seqs; ++s)
    for (int b = 0; b < (c.seqs[s].len + bs - 1) / bs; ++b) tables[s * max_blocks + b] = ids[next_id++];

  const size_t cache_elems = static_cast<size_t>(n_blocks) * bs * KH * D;
  auto kc = poisoned_cache(c.cache, cache_elems), vc = poisoned_cache(c.cache, cache_elems);
  std::vector<float> ks(static_cast<size_t>(n_blocks) * bs * KH, 0.0f), vs(ks.size(), 0.0f);
  KvLayer kv;
  kv.k = make_tensor(kc.data(), c.cache, {n_blocks, bs, KH, D});
  kv.v = make_tensor(vc.data(), c.cache, {n_blocks, bs, KH, D});
  kv.block_size = bs;
  if (c.cache == DType::I8 || c.cache == DType::FP8_E4M3) {
    kv.k_scales = ks.data();
    kv.v_scales = vs.data();
  }

  // All K/V of every sequence, stored in one call with a few skipped (negative) slots mixed in.
  std::vector<std::vector<float>> K(n_seqs), V(n_seqs);
  std::vector<float> kall, vall;
  std::vector<int32_t> slots;
  for (int s = 0; s < n_seqs; ++s) {
    K[s] = rng.normals(static_cast<size_t>(c.seqs[s].len) * KH * D);
    V[s] = rng.normals(static_cast<size_t>(c.seqs[s].len) * KH * D);
    for (int t = 0; t < c.seqs[s].len; ++t) {
      kall.insert(kall.end(), K[s].begin() + t * KH * D, K[s].begin() + (t + 1) * KH * D);
      vall.insert(vall.end(), V[s].begin() + t * KH * D, V[s].begin() + (t + 1) * KH * D);
      slots.push_back(tables[s * max_blocks + t / bs] * bs + t % bs);
      if (t % 7 == 3) {  // a padding row that must not be written anywhere
        auto junk = rng.normals(static_cast<size_t>(KH * D), 1e6f);
        kall.insert(kall.end(), junk.begin(), junk.end());
        vall.insert(vall.end(), junk.begin(), junk.end());
        slots.push_back(-1);
      }
    }
  }
  const int64_t n_store = static_cast<int64_t>(slots.size());
  Tensor tk = f32_tensor(kall, {n_store, KH, D}), tv = f32_tensor(vall, {n_store, KH, D});
  be.kv_store(kv, tk, tv, slots.data());

  std::vector<int32_t> qstart(n_seqs + 1, 0), lens(n_seqs);
  for (int s = 0; s < n_seqs; ++s) {
    qstart[s + 1] = qstart[s] + c.seqs[s].n_new;
    lens[s] = c.seqs[s].len;
  }
  const int n_tok = qstart[n_seqs];
  auto q = rng.normals(static_cast<size_t>(n_tok) * H * D);
  auto out = poisoned(q.size());
  AttentionBatch batch{n_seqs, qstart.data(), lens.data(), tables.data(), max_blocks};
  AttentionParams p;
  p.n_heads = H;
  p.n_kv_heads = KH;
  p.head_dim = D;
  p.scale = 1.0f / std::sqrt(static_cast<float>(D));
  p.sliding_window = c.window;
  p.logit_softcap = c.softcap;
  Tensor tq = f32_tensor(q, {n_tok, H, D}), to = f32_tensor(out, {n_tok, H, D});
  be.attention(tq, kv, batch, p, to);

  const double tol = c.cache == DType::F32 ? 2e-5 : 1e-4;
  for (int s = 0; s < n_seqs; ++s) {
    const int L = c.seqs[s].len, n_new = c.seqs[s].n_new;
    for (int j = 0; j < n_new; ++j) {
      const int pos = L - n_new + j;
      const int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
      for (int h = 0; h < H; ++h) {
        const int g = h / G;
        const float* qv = q.data() + (static_cast<size_t>(qstart[s] + j) * H + h) * D;
        std::vector<double> sc;
        double mx = -1e300;
        for (int t = lo; t <= pos; ++t) {
          auto kr = round_trip(c.cache, K[s].data() + (static_cast<size_t>(t) * KH + g) * D, D);
          double dot = 0;
          for (int i = 0; i < D; ++i) dot += double(qv[i]) * kr[i];
          dot *= p.scale;
          if (c.softcap > 0) dot = c.softcap * std::tanh(dot / c.softcap);
          sc.push_back(dot);
          mx = std::max(mx, dot);
        }
        double sum = 0;
        for (auto& x : sc) sum += (x = std::exp(x - mx));
        std::vector<double> ref(D, 0.0);
        for (int t = lo; t <= pos; ++t) {
          auto vr = round_trip(c.cache, V[s].data() + (static_cast<size_t>(t) * KH + g) * D, D);
          for (int i = 0; i < D; ++i) ref[i] += sc[t - lo] / sum * vr[i];
        }
        const float* got = out.data() + (static_cast<size_t>(qstart[s] + j) * H + h) * D;
        for (int i = 0; i < D; ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << "seq " << s << " tok " << j << " head " << h << " dim " << i;
          ASSERT_NEAR(got[i], ref[i], tol) << "seq " << s << " tok " << j << " head " << h << " dim " << i;
        }
      }
    }
  }
}

const std::vector<SeqSpec> kMixedBatch = {{45, 1}, {17, 17}, {70, 9}, {1, 1}, {130, 3}};

class AttentionTest : public BackendTest {};

TEST_P(AttentionTest, GqaRatios) {
  uint64_t seed = 1;
  for (auto [h, kh] : {std::pair{4, 4}, {4, 2}, {8, 2}, {16, 2}, {6, 1}}) {
    run_attention_case(*backend_, {h, kh, 64, 0, 0.0f, DType::F32, kMixedBatch}, seed++);
    if (HasFatalFailure()) return;
  }
  // Gemma 3 270M's shape (head_dim 256, one K/V head) as one GPU holds it and as each of two
  // tensor-parallel ranks does.
  for (auto [h, kh] : {std::pair{4, 1}, {2, 1}}) {
    run_attention_case(*backend_, {h, kh, 256, 0, 0.0f, DType::F32, kMixedBatch}, seed++);
    if (HasFatalFailure()) return;
  }
}

TEST_P(AttentionTest, HeadDimsWindowsSoftcap) {
  uint64_t seed = 20;
  for (int d : {80, 128, 256}) {
    for (int w : {0, 5, 20}) {
      run_attention_case(*backend_, {8, 4, d, w, w == 5 ? 30.0f : 0.0f, DType::F32, kMixedBatch}, seed++);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(AttentionTest, LongPrefill) {
  // One sequence, many query tiles and key tiles; a second decoding beside it.
  run_attention_case(*backend_, {4, 2, 64, 0, 0.0f, DType::F32, {{300, 300}, {260, 1}}}, 40);
  if (HasFatalFailure()) return;
  run_attention_case(*backend_, {4, 1, 64, 100, 0.0f, DType::F16, {{300, 200}, {260, 1}}}, 41);
}

TEST_P(AttentionTest, LongDecodeSplitsKeys) {
  // Few (seq, kv head) units and long contexts: keys are split across threads and merged.
  run_attention_case(*backend_, {4, 1, 64, 0, 0.0f, DType::F32, {{2100, 1}}}, 70);
  if (HasFatalFailure()) return;
  run_attention_case(*backend_, {8, 1, 128, 0, 0.0f, DType::F16, {{1500, 3}}}, 71);
  if (HasFatalFailure()) return;
  run_attention_case(*backend_, {4, 1, 64, 1300, 30.0f, DType::F32, {{2600, 2}}}, 72);
}

TEST_P(AttentionTest, CacheDtypes) {
  uint64_t seed = 60;
  for (DType t : {DType::F16, DType::BF16, DType::I8, DType::FP8_E4M3}) {
    run_attention_case(*backend_, {8, 2, 64, 0, 0.0f, t, kMixedBatch}, seed++);
    if (HasFatalFailure()) return;
    run_attention_case(*backend_, {4, 4, 128, 7, 0.0f, t, kMixedBatch}, seed++);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, AttentionTest, testing::ValuesIn(backend_cases()), case_name);

}  // namespace
}  // namespace ember::test
