#pragma once
// Added tokens (special and not) are found in the text before normalization and
// pre-tokenization, as HF's AddedVocabulary does: leftmost-longest matches of all added token
// contents, with the lstrip / rstrip / single_word flags, in two passes (tokens with
// normalized=false on the raw text, then tokens with normalized=true on the normalized pieces).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A span of text: either an added token (id >= 0) or plain text (id < 0).
struct Span {
  size_t begin, end;
  int32_t id;
};

// Leftmost-longest matcher over a set of added tokens (a byte trie).
class AddedTokenMatcher {
 public:
  // patterns[i] is matched for tokens[i]; patterns may differ from contents (normalized tokens).
  void build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }
  // Splits text into spans, as HF's find_matches; skip_special ignores special tokens (their
  // text stays plain text). Spans cover text in order; no empty plain spans.
  void split(std::string_view text, bool skip_special, std::vector<Span>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                       // index into tokens_
  };
  int32_t child(int32_t node, unsigned char b) const;
  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  std::vector<int32_t> root_;  // 256 entries: node for the first byte, or -1
};

}  // namespace ember::tok
