// libFuzzer target: any bytes as the body of every JSON route (/v1/completions,
// /v1/chat/completions, /tokenize, /detokenize) must parse to either a request the engine
// accepts or a 400 naming the problem: no crash, hang, leak or undefined behaviour. Accepted
// requests must respect the parser's own promises (token ids in the vocabulary, sampling
// parameters valid, non-empty stop strings), and the stop-string matcher must give the same
// answer however the text is cut into pieces.
#include "server/request_parser.h"
#include "server/stop_matcher.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

using namespace ember;
using namespace ember::server;

constexpr int kVocab = 512;

void require(bool ok) {
  if (!ok) std::abort();
}

void check_error(const ApiError& e) {
  require(e.status == 400);
  require(!e.message.empty());
}

void check_params(const SamplingParams& p) { require(p.validate(kVocab).is_ok()); }

void check_ids(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) require(id >= 0 && id < kVocab);
}

// The matcher over the text in pieces of `step` bytes equals the text cut at the first stop
// string to be completed as it grows (checked byte by byte).
void check_stop_matcher(const std::vector<std::string>& stops, std::string_view text, size_t step) {
  size_t cut = std::string_view::npos;
  for (size_t end = 1; end <= text.size() && cut == std::string_view::npos; ++end)
    for (const std::string& s : stops)
      if (s.size() <= end && text.substr(end - s.size(), s.size()) == s) cut = std::min(cut, end - s.size());
  StopMatcher m(stops);
  std::string out;
  for (size_t i = 0; i < text.size() && !m.stopped(); i += step) out += m.push(text.substr(i, step));
  out += m.flush();
  require(m.stopped() == (cut != std::string_view::npos));
  require(out == text.substr(0, cut == std::string_view::npos ? text.size() : cut));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto json = parse_json_body(body);
  if (!json.is_ok()) {
    check_error(json.error());
    return 0;
  }
  ParseLimits limits;
  limits.vocab_size = kVocab;

  auto completion = parse_completion_request(*json, limits);
  if (completion.is_ok()) {
    require(!completion->prompts.empty() && static_cast<int>(completion->prompts.size()) <= limits.max_prompts);
    for (const PromptSpec& p : completion->prompts) {
      require(p.text.has_value() || !p.token_ids.empty());
      check_ids(p.token_ids);
    }
    check_params(completion->gen.params);
    for (const std::string& s : completion->gen.stop)
      require(!s.empty() && static_cast<int>(s.size()) <= limits.max_stop_bytes);
    if (!completion->gen.stop.empty()) {
      check_stop_matcher(completion->gen.stop, body, 1);
      check_stop_matcher(completion->gen.stop, body, 7);
    }
  } else {
    check_error(completion.error());
  }

  auto chat = parse_chat_request(*json, limits);
  if (chat.is_ok()) {
    require(chat->messages.is_array() && !chat->messages.empty());
    for (const Json& m : chat->messages) require(m.is_object() && m.at("role").is_string() && m.at("content").is_string());
    check_params(chat->gen.params);
  } else {
    check_error(chat.error());
  }

  auto tokenize = parse_tokenize_request(*json, limits);
  if (tokenize.is_ok()) require(tokenize->prompt.has_value() != tokenize->messages.is_array());
  else check_error(tokenize.error());

  auto detokenize = parse_detokenize_request(*json, limits);
  if (detokenize.is_ok()) check_ids(detokenize->tokens);
  else check_error(detokenize.error());
  return 0;
}
