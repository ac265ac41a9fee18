#include "model/layers.h"

#include "core/check.h"

namespace ember {

Tensor rows_view(const Tensor& t, int64_t rows, int64_t cols) {
  Tensor v = t;
  v.n_dims = 2;
  v.shape = {rows, cols, 0, 0};
  return v;
}

namespace {
// [n, heads * head_dim] viewed as [n * heads, head_dim] for per-head norms.
Tensor per_head(const Tensor& t, int64_t n, int heads, int head_dim) {
  return rows_view(t, n * heads, head_dim);
}
Tensor heads_view(const Tensor& t, int64_t n, int heads, int head_dim) {
  Tensor v = t;
  v.n_dims = 3;
  v.shape = {n, heads, head_dim, 0};
  return v;
}
}  // namespace

namespace {
void check(const Status& st) { EMBER_CHECK(st.is_ok(), "{}", st.message()); }

// out = in @ w^T, or residual += in @ w^T when a residual is given. Tensor parallel: w holds
// this rank's input columns, so the products are partial sums, added up over the ranks by one
// all-reduce; rank 0 adds its product into the residual first (every rank holds the same
// residual), the others send theirs alone.
void project_out(LayerContext& ctx, const Tensor& in, const Tensor& w, Tensor& out, Tensor* residual) {
  Backend& be = ctx.backend;
  const bool parallel = ctx.shard.active();
  if (residual && (!parallel || ctx.shard.rank == 0)) {
    if (!be.matmul_accumulate(in, w, *residual)) {
      be.matmul(in, w, nullptr, out);
      be.add(*residual, out, *residual);
    }
    if (parallel) check(be.all_reduce_sum(*residual, *residual));
    return;
  }
  be.matmul(in, w, nullptr, out);
  if (parallel) check(be.all_reduce_sum(out, residual ? *residual : out));
}
}  // namespace

void attention_block(LayerContext& ctx, int index, const LayerWeights& w, KvLayer& kv, Tensor* residual) {
  const auto& c = ctx.config;
  auto& be = ctx.backend;
  const int64_t n = ctx.batch.n_tokens();
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  Tensor h = rows_view(ctx.act.h, n, c.d_model);
  Tensor q = rows_view(ctx.act.q, n, q_dim);       // [n, n_heads * head_dim]
  Tensor k = rows_view(ctx.act.k, n, kv_dim);      // [n, n_kv_heads * head_dim]
  Tensor v = rows_view(ctx.act.v, n, kv_dim);
  const MatmulTarget qkv[] = {{&w.wq, w.bq.valid() ? &w.bq : nullptr, &q},
                              {&w.wk, w.bk.valid() ? &w.bk : nullptr, &k},
                              {&w.wv, w.bv.valid() ? &w.bv : nullptr, &v}};
  be.hint_read_once(h);  // (the layer normalizes into h again before its next use)
  be.matmul_many(h, qkv);
  if (w.q_norm.valid()) {
    Tensor qh = per_head(q, n, c.n_heads, c.head_dim);
    Tensor kh = per_head(k, n, c.n_kv_heads, c.head_dim);
    be.rms_norm(qh, w.q_norm, c.norm_eps, qh);
    be.rms_norm(kh, w.k_norm, c.norm_eps, kh);
  }
  const bool sliding = c.layer_sliding[static_cast<size_t>(index)];
  RopeParams rope;
  rope.head_dim = c.head_dim;
  rope.rotary_dim = c.head_dim;
  rope.neox = c.rope_neox;
  rope.inv_freq = sliding ? ctx.rope_local : ctx.rope_global;
  Tensor q3 = heads_view(q, n, c.n_heads, c.head_dim);    // [n, n_heads, head_dim]
  Tensor k3 = heads_view(k, n, c.n_kv_heads, c.head_dim); // [n, n_kv_heads, head_dim]
  Tensor v3 = heads_view(v, n, c.n_kv_heads, c.head_dim);
  be.rope(q3, ctx.batch.positions.data(), rope);
  be.rope(k3, ctx.batch.positions.data(), rope);
  be.kv_store(kv, k3, v3, ctx.batch.slot_mapping.data());
  AttentionParams ap;
  ap.n_heads = c.n_heads;
  ap.n_kv_heads = c.n_kv_heads;
  ap.head_dim = c.head_dim;
  ap.scale = c.attn_scale;
  ap.sliding_window = sliding ? c.sliding_window : 0;
  ap.logit_softcap = c.attn_logit_softcap;
  Tensor attn = heads_view(ctx.act.attn, n, c.n_heads, c.head_dim);
  be.attention(q3, kv, ctx.attn_batch, ap, attn);
  Tensor attn2 = rows_view(ctx.act.attn, n, q_dim);
  Tensor o = rows_view(ctx.act.o, n, c.d_model);
  project_out(ctx, attn2, w.wo, o, residual);
}

void mlp_block(LayerContext& ctx, const LayerWeights& w, Tensor* residual) {
  const auto& c = ctx.config;
  auto& be = ctx.backend;
  const int64_t n = ctx.batch.n_tokens();
  Tensor h = rows_view(ctx.act.h, n, c.d_model);
  Tensor gate = rows_view(ctx.act.gate, n, c.d_ff);  // [n, d_ff]
  Tensor up = rows_view(ctx.act.up, n, c.d_ff);
  const MatmulTarget gate_up[] = {{&w.w_gate, nullptr, &gate}, {&w.w_up, nullptr, &up}};
  be.hint_read_once(h);
  be.matmul_many(h, gate_up);
  be.hint_read_once(up);
  be.glu(gate, up, c.gelu_tanh, gate);
  Tensor o = rows_view(ctx.act.o, n, c.d_model);
  be.hint_read_once(gate);
  project_out(ctx, gate, w.w_down, o, residual);
}

}  // namespace ember
