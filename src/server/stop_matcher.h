#pragma once
// StopMatcher: finds stop strings in generated text that arrives in pieces (one detokenized
// token at a time), so a stop string split across tokens is still found. Text is released only
// once it cannot be the start of a stop string: a streaming client never sees text that a later
// token turns into part of a stop string. The stop string itself and everything after it are
// dropped, as OpenAI does. Where stop strings overlap, the one completed first wins.
#include <string>
#include <string_view>
#include <vector>

namespace ember::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});

  // Adds generated text and returns the text that is now safe to emit (maybe empty). Once a
  // stop string was found, returns only the text before it and then nothing.
  std::string push(std::string_view text);
  // End of generation: whatever was held back (nothing once stopped).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string found, "" before that.
  const std::string& matched() const { return matched_; }
  // Bytes currently held back.
  size_t held() const { return pending_.size(); }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t partial_match_length() const;

  std::vector<std::string> stops_;
  std::string pending_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace ember::server
