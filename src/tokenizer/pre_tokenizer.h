#pragma once
// Pre-tokenizers of HF tokenizer.json ("pre_tokenizer"): split normalized text into the words the
// model encodes one at a time.
#include "core/status.h"
#include "tokenizer/regex.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace ember::tok {

struct Piece {
  std::string text;
  bool at_origin = false;   // starts at byte 0 of the caller's input (Metaspace "first")
  bool byte_level = false;  // text holds raw bytes that stand for GPT-2 byte-level characters
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class PrependScheme { Always, First, Never };

class PreTokenizer {
 public:
  enum class Kind { Split, ByteLevel, Metaspace };
  struct Step {
    Kind kind;
    std::shared_ptr<const Regex> regex;  // Split; ByteLevel with use_regex
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    std::string replacement;        // Metaspace
    PrependScheme prepend = PrependScheme::Always;
    bool split = false;             // Metaspace
  };

  // null JSON -> no pre-tokenization (each piece is one word).
  static Result<PreTokenizer> from_json(const nlohmann::json& j);
  // Split by a regex (Oniguruma syntax) with the given behavior.
  static Result<PreTokenizer> split_regex(const std::string& pattern, SplitBehavior behavior);
  static Result<PreTokenizer> byte_level(bool add_prefix_space, bool use_regex);
  static PreTokenizer metaspace(std::string replacement, PrependScheme prepend, bool split);
  void append(const PreTokenizer& other);

  // Replaces `pieces` by their words. Empty words are dropped.
  void apply(std::vector<Piece>& pieces) const;

 private:
  Status add_json(const nlohmann::json& j);
  std::vector<Step> steps_;
};

// The GPT-2 pre-tokenizer regex (ByteLevel with use_regex).
extern const char* const kGpt2SplitPattern;

}  // namespace ember::tok
