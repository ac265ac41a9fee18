#pragma once
// Tokenizer: text <-> token ids, identical to Hugging Face `tokenizers` for the BPE families
// ember runs (byte-level BPE of GPT-2 / Llama 3 / Qwen2, SentencePiece-style BPE with byte
// fallback of Llama 2 / Mistral / Gemma), loaded from a HF directory (tokenizer.json +
// tokenizer_config.json) or from GGUF metadata (tokenizer.ggml.*, built as transformers builds it).
//
// Input text that is not valid UTF-8 is first made valid by replacing each maximal ill-formed
// subsequence with U+FFFD (what Python's bytes.decode(errors="replace") gives the HF oracle).
// encode/decode are const and thread-safe.
#include "core/status.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/token_index.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ember {

class WeightSource;

namespace tok {
// Everything a loader extracts; Tokenizer::from_parts assembles it.
struct TokenizerParts {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  Decoder decoder;
  PostProcessor post_processor;
  std::vector<AddedToken> added_tokens;
  std::optional<int32_t> bos_id, eos_id;
  std::vector<int32_t> extra_eos_ids;  // stop tokens besides eos (end of turn, generation_config)
};
}  // namespace tok

class Tokenizer {
 public:
  // dir/tokenizer.json, plus dir/tokenizer_config.json and dir/generation_config.json when present.
  static Result<std::unique_ptr<Tokenizer>> from_hf_dir(const std::string& dir);
  // The same from parsed JSON; config / generation_config may be null.
  static Result<std::unique_ptr<Tokenizer>> from_hf_json(const nlohmann::json& tokenizer_json,
                                                         const nlohmann::json& config,
                                                         const nlohmann::json& generation_config = nullptr);
  // GGUF metadata as JSON (key -> value, arrays as arrays), e.g. WeightSource::metadata().
  static Result<std::unique_ptr<Tokenizer>> from_gguf_metadata(const nlohmann::json& md);
  static Result<std::unique_ptr<Tokenizer>> from_parts(tok::TokenizerParts parts);
  // The tokenizer of an opened checkpoint: GGUF metadata, or the HF directory's tokenizer.json.
  static Result<std::unique_ptr<Tokenizer>> from_weight_source(const WeightSource& source);

  // add_special: the BOS/EOS the model's own tokenizer adds by default (HF add_special_tokens).
  // parse_special=false treats special tokens' text as plain text (HF encode_special_tokens).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = true) const;
  // skip_special drops special tokens. Ids outside the vocabulary are ignored.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // The bytes each id adds in the middle of a text (Decoder::token_bytes), [vocab_size()];
  // "" for special tokens and unknown ids. Non-special added tokens are their content.
  std::vector<std::string> token_bytes_table() const;
  // The vocabulary string of a token ("Ġthe", "▁the", "<0x0A>", "<bos>"); "" for unknown ids.
  std::string token_piece(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view piece) const;
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  // Every id that ends generation: eos plus end-of-turn tokens the model defines.
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool is_special(int32_t id) const;
  // A <0xNN> token that the decoder joins with its neighbours into one byte string (byte
  // fallback): text decoded from a run of them is only final once the run ends.
  bool is_byte_fallback_token(int32_t id) const;
  std::string bos_token() const { return bos_id_ ? token_piece(*bos_id_) : std::string(); }
  std::string eos_token() const { return eos_id_ ? token_piece(*eos_id_) : std::string(); }
  // Ids the encoder adds around a sequence when add_special is true.
  const std::vector<int32_t>& special_prefix() const { return parts_.post_processor.prefix; }
  const std::vector<int32_t>& special_suffix() const { return parts_.post_processor.suffix; }

 private:
  Tokenizer() = default;
  void encode_plain(std::string_view text, bool at_origin, bool parse_special, std::vector<int32_t>& out) const;

  tok::TokenizerParts parts_;
  tok::AddedTokenMatcher raw_matcher_;         // added tokens with normalized=false
  tok::AddedTokenMatcher normalized_matcher_;  // added tokens with normalized=true
  std::unordered_map<int32_t, size_t> added_by_id_;
  tok::TokenIndex added_by_content_;  // content -> id (the first added token with it)
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_;
  std::vector<int32_t> eos_ids_;
  bool byte_fallback_decoding_ = false;
};

// Streams text from ids one at a time: never emits an incomplete UTF-8 sequence, and the
// concatenation of all push() results and flush() equals decode(all ids).
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  // Whatever is held back (an incomplete character at the end of the stream).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // start of the decode window
  size_t read_offset_ = 0;    // ids before this have been emitted
};

}  // namespace ember
