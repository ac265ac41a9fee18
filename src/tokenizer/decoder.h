#pragma once
// Decoders of HF tokenizer.json ("decoder"): token strings -> text. Steps transform the list of
// token strings in order; the result is their concatenation (or, with no decoder at all, the
// tokens joined by spaces, as HF does).
#include "core/status.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ember::tok {

class Decoder {
 public:
  enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace };
  struct Step {
    Kind kind = Kind::Fuse;
    std::string pattern, content;  // Replace; Strip uses content as the character to strip
    size_t start = 0, stop = 0;    // Strip
    bool prepend_first = true;     // Metaspace: drop the leading replacement of the first token
  };

  static Result<Decoder> from_json(const nlohmann::json& j);
  static Decoder byte_level();
  static Decoder sentencepiece(bool strip_leading_space);  // Replace ▁, ByteFallback, Fuse[, Strip]

  // The text of tokens. Output is valid UTF-8 (ill-formed bytes become U+FFFD as in HF).
  std::string decode(std::vector<std::string> tokens) const;
  // The raw bytes one token adds in the middle of a text (not first: no Metaspace prefix drop,
  // no strip of the text's start), without the UTF-8 repair decode() does: a token may carry
  // part of a character. For constrained decoding, which judges a token by its bytes.
  std::string token_bytes(std::string token) const;
  // Whether consecutive <0xNN> tokens are decoded together as one byte string (ByteFallback).
  bool has_byte_fallback() const;

 private:
  static Step step(Kind kind, std::string pattern = {}, std::string content = {});
  Status add_json(const nlohmann::json& j);
  std::vector<Step> steps_;
  bool none_ = true;  // no decoder: join with spaces
};

// "<0xNN>": a byte-fallback token's spelling.
bool is_byte_token_piece(const std::string& piece);

}  // namespace ember::tok
