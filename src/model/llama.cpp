// Llama-family pre-norm decoder layer: Llama 2/3.x, Mistral, Qwen2 (q/k/v biases) and
// Qwen3 (q/k norms); the differences live in the weights attention_block finds.
#include "model/layers.h"

namespace ember {

void llama_layer(LayerContext& ctx, int index, const LayerWeights& w, KvLayer& kv) {
  const auto& c = ctx.config;
  auto& be = ctx.backend;
  const int64_t n = ctx.batch.n_tokens();
  Tensor x = rows_view(ctx.act.x, n, c.d_model);  // residual stream [n, d_model]
  Tensor h = rows_view(ctx.act.h, n, c.d_model);
  be.rms_norm(x, w.attn_norm, c.norm_eps, h);
  attention_block(ctx, index, w, kv, &x);  // x += o
  be.rms_norm(x, w.ffn_norm, c.norm_eps, h);
  mlp_block(ctx, w, &x);  // x += o
}

}  // namespace ember
