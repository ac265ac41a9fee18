#pragma once
// Normalizers of HF tokenizer.json ("normalizer"): a flat list of steps applied in order to each
// piece of text that is not an added token.
#include "core/status.h"
#include "tokenizer/regex.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace ember::tok {

class Normalizer {
 public:
  enum class Kind { Replace, Prepend, NFC, NFD, NFKC, NFKD, Lowercase, Strip };
  struct Step {
    Kind kind;
    std::string pattern;                 // Replace: literal pattern (when regex is null)
    std::shared_ptr<const Regex> regex;  // Replace with a Regex pattern
    std::string content;                 // Replace / Prepend
    bool strip_left = false, strip_right = false;
  };

  // null JSON -> an empty normalizer. Unknown types are an error naming the type.
  static Result<Normalizer> from_json(const nlohmann::json& j);
  static Normalizer replace(std::string pattern, std::string content);
  static Normalizer prepend(std::string content);

  void append(const Normalizer& other);
  bool empty() const { return steps_.empty(); }
  // s must be valid UTF-8; the result is valid UTF-8.
  std::string apply(std::string s) const;

 private:
  Status add_json(const nlohmann::json& j);
  std::vector<Step> steps_;
};

}  // namespace ember::tok
