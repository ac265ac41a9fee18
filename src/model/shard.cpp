#include "model/shard.h"

namespace ember {

Result<ModelConfig> shard_config(const ModelConfig& full, const ShardSpec& s) {
  if (s.size < 1 || s.rank < 0 || s.rank >= s.size)
    return Status::errorf("tensor parallel: rank {} of {} ranks", s.rank, s.size);
  if (!s.active()) return full;
  if (full.n_heads % s.size != 0)
    return Status::errorf("tensor parallel size {} does not divide the model's {} attention heads", s.size,
                          full.n_heads);
  if (full.n_kv_heads % s.size != 0 && s.size % full.n_kv_heads != 0)
    return Status::errorf("tensor parallel size {} and the model's {} K/V heads: one must divide the other",
                          s.size, full.n_kv_heads);
  if (full.d_ff % s.size != 0)
    return Status::errorf("tensor parallel size {} does not divide the model's FFN width {}", s.size, full.d_ff);
  ModelConfig c = full;
  c.n_heads = full.n_heads / s.size;
  c.n_kv_heads = full.n_kv_heads >= s.size ? full.n_kv_heads / s.size : 1;
  c.d_ff = full.d_ff / s.size;
  return c;
}

int shard_first_kv_head(const ModelConfig& full, const ShardSpec& s) {
  // n_kv_heads >= size: consecutive groups; fewer: `size / n_kv_heads` ranks share each head,
  // the one their q heads (rank * n_heads / size onwards) attend to.
  return s.rank * full.n_kv_heads / s.size;
}

}  // namespace ember
