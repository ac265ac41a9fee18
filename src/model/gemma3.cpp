// Gemma 3 decoder layer: "sandwich" norms around attention and the MLP (normalize the
// block's input and its output before adding to the residual), GeGLU, q/k norms, and
// sliding-window attention on five of every six layers.
#include "model/layers.h"

namespace ember {

void gemma3_layer(LayerContext& ctx, int index, const LayerWeights& w, KvLayer& kv) {
  const auto& c = ctx.config;
  auto& be = ctx.backend;
  const int64_t n = ctx.batch.n_tokens();
  Tensor x = rows_view(ctx.act.x, n, c.d_model);  // residual stream [n, d_model]
  Tensor h = rows_view(ctx.act.h, n, c.d_model);
  Tensor o = rows_view(ctx.act.o, n, c.d_model);
  be.rms_norm(x, w.attn_norm, c.norm_eps, h);
  attention_block(ctx, index, w, kv);
  be.rms_norm(o, w.post_attn_norm, c.norm_eps, o);
  be.add(x, o, x);
  be.rms_norm(x, w.ffn_norm, c.norm_eps, h);
  mlp_block(ctx, w);
  be.rms_norm(o, w.post_ffn_norm, c.norm_eps, o);
  be.add(x, o, x);
}

}  // namespace ember
