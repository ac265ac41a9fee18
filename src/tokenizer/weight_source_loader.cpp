// Tokenizer::from_weight_source: picks the loader by checkpoint format.
#include "loader/weight_source.h"
#include "tokenizer/tokenizer.h"

namespace ember {

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_weight_source(const WeightSource& source) {
  if (source.format() == CheckpointFormat::GGUF) {
    auto t = from_gguf_metadata(source.metadata());
    if (!t) return t.status().with_context(source.path());
    return t;
  }
  return from_hf_dir(source.path());
}

}  // namespace ember
