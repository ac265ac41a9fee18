// Causal attention over the paged K/V cache, FlashAttention's algorithm on the CPU: keys are
// visited in tiles with an online softmax (running max m, running sum l, rescaled output
// accumulator), so no [n_queries, n_keys] score matrix ever exists.
//
// Work unit = (sequence, kv head, tile of query tokens). The query heads that share a kv head
// (GQA/MQA) are processed together, so each K/V tile is converted once for all of them.
// Units are handed out through an atomic counter inside one pool run: causal tiles late in a
// prompt see more keys than early ones, so a static split would leave threads idle.
#include "backend/cpu/context.h"
#include "backend/cpu/kv_cache_format.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <utility>

namespace ember::cpu {

namespace {

constexpr int kKeyTile = 64;       // most keys per tile (the score row stride)
constexpr int kMinKeysPerSplit = 512;  // keys below which splitting a unit does not pay
constexpr int kRowsPerUnit = 64;   // query rows (tokens x heads of a group) per work unit:
                                   // each K/V tile is converted once for all of them

struct Unit {
  int seq;
  int kv_head;
  int j0, j1;          // query tokens [j0, j1) of the sequence's chunk
  int split = 0;       // this item's part of the unit's keys (flash-decoding split)
  int n_splits = 1;
  int64_t partial = -1;  // index of its partial state when n_splits > 1
};

// Partial softmax state of one split item: o [rows, D] (unnormalized), m [rows], l [rows].
struct Partial {
  float* o;
  float* m;
  float* l;
};

struct Geometry {
  int n_heads, n_kv_heads, group, head_dim, block_size;
  int64_t n_slots;
  int key_tile;  // keys per tile: K and V tiles of ~16 KB each stay in L1
  // Batch-invariant mode: tiles start at multiples of key_tile, and scores come from one
  // dot product per (row, key), so a row sees the same sums whatever unit it is in.
  bool invariant = false;
};

// Per-thread scratch for one unit.
struct UnitScratch {
  float* q;     // [rows, head_dim] queries, pre-scaled
  float* o;     // [rows, head_dim] output accumulators
  float* m;     // [rows] running max
  float* l;     // [rows] running sum
  float* s;     // [rows, kKeyTile] scores of the current tile
  float* kbuf;  // [kKeyTile, head_dim]
  float* vbuf;  // [kKeyTile, head_dim]
  float* work;  // [kKeyTile, head_dim] for the score kernel
  static size_t bytes(int rows, int head_dim) {
    const size_t f = static_cast<size_t>(rows) * head_dim * 2 + static_cast<size_t>(rows) * (2 + kKeyTile) +
                     static_cast<size_t>(kKeyTile) * head_dim * 3;
    return f * sizeof(float) + 64;
  }
  static UnitScratch carve(uint8_t* base, int rows, int head_dim) {
    auto* f = reinterpret_cast<float*>(base);
    UnitScratch u;
    u.q = f;
    f += static_cast<size_t>(rows) * head_dim;
    u.o = f;
    f += static_cast<size_t>(rows) * head_dim;
    u.m = f;
    f += rows;
    u.l = f;
    f += rows;
    u.s = f;
    f += static_cast<size_t>(rows) * kKeyTile;
    u.kbuf = f;
    f += static_cast<size_t>(kKeyTile) * head_dim;
    u.vbuf = f;
    f += static_cast<size_t>(kKeyTile) * head_dim;
    u.work = f;
    return u;
  }
};

// Keys any row of unit u may see: [lo, hi).
std::pair<int64_t, int64_t> unit_keys(const Unit& u, const AttentionBatch& b, const AttentionParams& p) {
  const int n_new = b.query_start[u.seq + 1] - b.query_start[u.seq];
  const int64_t pos0 = b.seq_lens[u.seq] - n_new;
  const int64_t first_pos = pos0 + u.j0, last_pos = pos0 + u.j1 - 1;
  const int64_t lo = p.sliding_window > 0 ? std::max<int64_t>(0, first_pos - p.sliding_window + 1) : 0;
  return {lo, std::min<int64_t>(b.seq_lens[u.seq], last_pos + 1)};
}

// Runs item u; writes the normalized output, or (split items) its partial state.
void run_unit(const KernelTable& kt, const Unit& u, const Tensor& q, const KvLayer& kv, const AttentionBatch& b,
              const AttentionParams& p, const Geometry& g, UnitScratch& sc, float* out, const Partial* part) {
  const int D = g.head_dim;
  const int G = g.group;
  const int32_t q_first = b.query_start[u.seq];
  const int n_new = b.query_start[u.seq + 1] - q_first;
  const int64_t L = b.seq_lens[u.seq];
  const int64_t pos0 = L - n_new;  // position of the chunk's first token
  const int rows = (u.j1 - u.j0) * G;
  const float* pq = q.as<float>();
  const int64_t q_token_stride = static_cast<int64_t>(g.n_heads) * D;

  // Gather queries: row r = (token j0 + r / G, head kv_head * G + r % G).
  for (int r = 0; r < rows; ++r) {
    const int64_t tok = q_first + u.j0 + r / G;
    const int h = u.kv_head * G + r % G;
    const float* src = pq + tok * q_token_stride + static_cast<int64_t>(h) * D;
    for (int i = 0; i < D; ++i) sc.q[r * D + i] = src[i] * p.scale;
    std::fill(sc.o + static_cast<size_t>(r) * D, sc.o + static_cast<size_t>(r + 1) * D, 0.0f);
    sc.m[r] = -std::numeric_limits<float>::infinity();
    sc.l[r] = 0.0f;
  }

  // Keys of this item: the unit's visible range, or this split's share of it (whole tiles).
  auto [k_lo, k_hi] = unit_keys(u, b, p);
  if (g.invariant) k_lo = k_lo / g.key_tile * g.key_tile;  // rows mask what they do not see
  if (u.n_splits > 1) {
    const int64_t tiles = (k_hi - k_lo + g.key_tile - 1) / g.key_tile;
    const int64_t per = (tiles + u.n_splits - 1) / u.n_splits * g.key_tile;
    const int64_t lo = std::min(k_hi, k_lo + per * u.split);
    k_hi = std::min(k_hi, lo + per);
    k_lo = lo;
  }
  const int32_t* table = b.block_tables + static_cast<int64_t>(u.seq) * b.max_blocks_per_seq;
  const float neg_inf = -std::numeric_limits<float>::infinity();

  for (int64_t t0 = k_lo; t0 < k_hi; t0 += g.key_tile) {
    const int nk = static_cast<int>(std::min<int64_t>(g.key_tile, k_hi - t0));
    // Convert this tile's K and V rows to float.
    for (int t = 0; t < nk; ++t) {
      const int64_t pos = t0 + t;
      const int64_t blk = table[pos / g.block_size];
      const int64_t slot = blk * g.block_size + pos % g.block_size;
      EMBER_CHECK(blk >= 0 && slot < g.n_slots, "attention: block id {} out of range", blk);
      kv_read_head(kt, kv.k, kv.k_scales, slot, g.n_kv_heads, u.kv_head, D, sc.kbuf + static_cast<size_t>(t) * D);
      kv_read_head(kt, kv.v, kv.v_scales, slot, g.n_kv_heads, u.kv_head, D, sc.vbuf + static_cast<size_t>(t) * D);
    }
    // Scores of every row against the whole tile; masked entries are dropped below. The
    // blocked score kernel picks its summation order by the tile's shape (rows, keys).
    if (g.invariant) {
      for (int r = 0; r < rows; ++r)
        for (int t = 0; t < nk; ++t)
          sc.s[static_cast<size_t>(r) * kKeyTile + t] =
              kt.dot_f32(sc.q + static_cast<size_t>(r) * D, sc.kbuf + static_cast<size_t>(t) * D, D);
    } else {
      kt.attn_scores(sc.q, rows, sc.kbuf, nk, D, sc.s, kKeyTile, sc.work);
    }
    for (int r = 0; r < rows; ++r) {
      const int64_t qpos = pos0 + u.j0 + r / G;
      // Visible keys of this row within the tile: [tb, te).
      const int64_t lo = p.sliding_window > 0 ? std::max<int64_t>(t0, qpos - p.sliding_window + 1) : t0;
      const int64_t hi = std::min<int64_t>(t0 + nk, qpos + 1);
      float* srow = sc.s + static_cast<size_t>(r) * kKeyTile;
      if (lo >= hi) {  // nothing visible: zero weights, accumulator untouched
        std::fill(srow, srow + nk, 0.0f);
        continue;
      }
      const int tb = static_cast<int>(lo - t0), te = static_cast<int>(hi - t0);
      if (p.logit_softcap > 0.0f)
        for (int t = tb; t < te; ++t) srow[t] = p.logit_softcap * std::tanh(srow[t] / p.logit_softcap);
      const float tile_max = kt.max_f32(srow + tb, te - tb);
      std::fill(srow, srow + tb, neg_inf);
      std::fill(srow + te, srow + nk, neg_inf);
      const float m_new = std::max(sc.m[r], tile_max);
      const float corr = sc.m[r] == neg_inf ? 0.0f : std::exp(sc.m[r] - m_new);
      sc.l[r] = sc.l[r] * corr + kt.exp_sub_sum(srow, m_new, nk);
      sc.m[r] = m_new;
      if (corr != 1.0f) {
        float* orow = sc.o + static_cast<size_t>(r) * D;
        for (int i = 0; i < D; ++i) orow[i] *= corr;
      }
    }
    kt.attn_accumulate(sc.s, kKeyTile, rows, sc.vbuf, nk, D, sc.o);
  }

  if (part) {
    std::copy(sc.o, sc.o + static_cast<size_t>(rows) * D, part->o);
    std::copy(sc.m, sc.m + rows, part->m);
    std::copy(sc.l, sc.l + rows, part->l);
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const int64_t tok = q_first + u.j0 + r / G;
    const int h = u.kv_head * G + r % G;
    float* dst = out + tok * q_token_stride + static_cast<int64_t>(h) * D;
    const float inv = sc.l[r] > 0.0f ? 1.0f / sc.l[r] : 0.0f;
    for (int i = 0; i < D; ++i) dst[i] = sc.o[static_cast<size_t>(r) * D + i] * inv;
  }
}

}  // namespace

void cpu_attention(CpuContext& ctx, const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                   const AttentionParams& p, Tensor& out) {
  EMBER_CHECK(q.dtype == DType::F32 && out.dtype == DType::F32, "attention: q and out must be F32");
  EMBER_CHECK(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 && p.head_dim > 0,
              "attention: heads {} kv heads {} head_dim {}", p.n_heads, p.n_kv_heads, p.head_dim);
  EMBER_CHECK(kv_dtype_supported(kv.k.dtype) && kv_dtype_supported(kv.v.dtype), "attention: cache dtypes {} / {}",
              dtype_name(kv.k.dtype), dtype_name(kv.v.dtype));
  EMBER_CHECK(kv.k.n_dims == 4 && kv.k.dim(2) == p.n_kv_heads && kv.k.dim(3) == p.head_dim &&
                  kv.k.dim(1) == kv.block_size,
              "attention: cache {} for {} kv heads x {}", shape_string(kv.k), p.n_kv_heads, p.head_dim);
  const int n_seqs = batch.n_seqs;
  const int64_t n_tokens = n_seqs == 0 ? 0 : batch.query_start[n_seqs];
  const int64_t per_token = static_cast<int64_t>(p.n_heads) * p.head_dim;
  EMBER_CHECK(q.numel() == n_tokens * per_token && out.numel() == n_tokens * per_token,
              "attention: q {} out {} for {} tokens", shape_string(q), shape_string(out), n_tokens);

  Geometry g{p.n_heads, p.n_kv_heads, p.n_heads / p.n_kv_heads, p.head_dim, kv.block_size,
             kv.k.dim(0) * kv.k.dim(1), std::clamp(4096 / p.head_dim / 8 * 8, 8, kKeyTile), ctx.batch_invariant};
  const int tokens_per_unit = std::max(1, kRowsPerUnit / g.group);
  std::vector<Unit> units;
  for (int s = 0; s < n_seqs; ++s) {
    const int n_new = batch.query_start[s + 1] - batch.query_start[s];
    EMBER_CHECK(n_new >= 0 && batch.seq_lens[s] >= n_new, "attention: seq {} has {} new tokens, length {}", s,
                n_new, batch.seq_lens[s]);
    EMBER_CHECK((batch.seq_lens[s] + kv.block_size - 1) / kv.block_size <= batch.max_blocks_per_seq,
                "attention: seq {} length {} exceeds its block table", s, batch.seq_lens[s]);
    for (int h = 0; h < g.n_kv_heads; ++h)
      for (int j = 0; j < n_new; j += tokens_per_unit) units.push_back({s, h, j, std::min(n_new, j + tokens_per_unit)});
  }
  if (units.empty()) return;

  // Flash-decoding: with fewer units than threads (decode with few kv heads), long key
  // ranges are split into parts that run in parallel and are merged afterwards.
  const int nth = ctx.pool.size();
  std::vector<Unit> items;
  std::vector<size_t> first_item;  // per unit: index of its first item
  int64_t n_partials = 0;
  // Not in batch-invariant mode: a split sums a row's keys in another order.
  const size_t want = units.size() >= static_cast<size_t>(nth) || ctx.batch_invariant
                          ? 1
                          : (2 * static_cast<size_t>(nth) + units.size() - 1) / units.size();
  for (const Unit& u : units) {
    first_item.push_back(items.size());
    auto [lo, hi] = unit_keys(u, batch, p);
    const int splits = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(want), std::max<int64_t>(1, (hi - lo) / kMinKeysPerSplit)));
    for (int sp = 0; sp < splits; ++sp) {
      Unit it = u;
      it.split = sp;
      it.n_splits = splits;
      it.partial = splits > 1 ? n_partials++ : -1;
      items.push_back(it);
    }
  }

  const int max_rows = tokens_per_unit * g.group;
  const size_t scratch_bytes = UnitScratch::bytes(max_rows, g.head_dim);
  for (auto& s : ctx.thread_scratch) s.ensure(scratch_bytes);
  const size_t partial_floats = static_cast<size_t>(max_rows) * (g.head_dim + 2);
  auto* partials = reinterpret_cast<float*>(ctx.shared_scratch.ensure(sizeof(float) * partial_floats * static_cast<size_t>(n_partials) + 64));
  auto partial_at = [&](int64_t i) {
    float* base = partials + static_cast<size_t>(i) * partial_floats;
    return Partial{base, base + static_cast<size_t>(max_rows) * g.head_dim, base + static_cast<size_t>(max_rows) * (g.head_dim + 1)};
  };

  std::atomic<size_t> next{0};
  float* pout = out.as<float>();
  auto compute = [&](int ith, int) {
    UnitScratch sc = UnitScratch::carve(ctx.thread_scratch[static_cast<size_t>(ith)].ensure(scratch_bytes), max_rows,
                                        g.head_dim);
    for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < items.size();
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      const Partial part = items[i].partial >= 0 ? partial_at(items[i].partial) : Partial{};
      run_unit(ctx.kt, items[i], q, kv, batch, p, g, sc, pout, items[i].partial >= 0 ? &part : nullptr);
    }
  };
  // Merge the parts of a split unit: O = sum_s e^(m_s - M) O_s / sum_s e^(m_s - M) l_s.
  auto merge_unit = [&](size_t ui) {
    const Unit& u0 = items[first_item[ui]];
    if (u0.n_splits == 1) return;
    const int rows = (u0.j1 - u0.j0) * g.group;
    const int32_t q_first = batch.query_start[u0.seq];
    for (int r = 0; r < rows; ++r) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int sp = 0; sp < u0.n_splits; ++sp) mx = std::max(mx, partial_at(u0.partial + sp).m[r]);
      const int64_t tok = q_first + u0.j0 + r / g.group;
      const int h = u0.kv_head * g.group + r % g.group;
      float* dst = pout + tok * per_token + static_cast<int64_t>(h) * g.head_dim;
      std::fill(dst, dst + g.head_dim, 0.0f);
      float l = 0.0f;
      for (int sp = 0; sp < u0.n_splits; ++sp) {
        const Partial pt = partial_at(u0.partial + sp);
        if (pt.m[r] == -std::numeric_limits<float>::infinity()) continue;  // saw no keys
        const float w = std::exp(pt.m[r] - mx);
        l += w * pt.l[r];
        ctx.kt.scale_axpy_f32(dst, 1.0f, w, pt.o + static_cast<size_t>(r) * g.head_dim, g.head_dim);
      }
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      for (int i = 0; i < g.head_dim; ++i) dst[i] *= inv;
    }
  };
  if (nth == 1 || items.size() == 1) {
    compute(0, 1);
  } else {
    ctx.pool.run(compute);
  }
  if (n_partials == 0) return;
  // A second run rather than a barrier inside the first: a descheduled thread then delays
  // nobody (the others claim its units).
  std::atomic<size_t> next_unit{0};
  ctx.pool.run([&](int, int) {
    for (size_t ui = next_unit.fetch_add(1, std::memory_order_relaxed); ui < units.size();
         ui = next_unit.fetch_add(1, std::memory_order_relaxed))
      merge_unit(ui);
  });
}

}  // namespace ember::cpu
