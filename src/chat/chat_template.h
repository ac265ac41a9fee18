#pragma once
// Chat templates: renders a model's Jinja `chat_template` exactly as Hugging Face
// transformers does (jinja2's ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks, loop controls, transformers' tojson / raise_exception / strftime_now).
//
// Templates outside the supported subset fail with an error that names the construct
// and line; ember never renders a template differently from jinja2 on purpose.
//
// JSON inputs are nlohmann::ordered_json because key order is visible to templates
// (tojson, items()); parse requests with ordered_json to keep the client's order.
#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "chat/interpreter.h"
#include "core/status.h"

namespace ember::chat {

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // Special tokens as transformers passes them; an empty string leaves the variable
  // undefined, as for a tokenizer without that token.
  std::string bos_token, eos_token;
  // More template variables (tools, documents, enable_thinking, other special tokens);
  // they override the ones above. `tools` and `documents` default to None.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
  // Clock for strftime_now(); the current time when unset.
  std::optional<std::time_t> now;
  // Apply transformers' message preparation: drop keys whose value is null and copy the
  // reasoning into both `reasoning_content` and `thinking`.
  bool normalize_messages = true;
  RenderLimits limits;
};

class ChatTemplate {
 public:
  // Errors name the line and the construct, e.g. "chat template: line 3: unsupported tag 'include'".
  static Result<ChatTemplate> parse(std::string_view source);

  // `messages` is the list of message objects. A template's raise_exception(msg) gives an
  // error whose message is exactly `msg`; other errors start with "chat template: ".
  Result<std::string> render(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const;

  const std::string& source() const { return *source_; }

 private:
  ChatTemplate() = default;
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const Body> body_;
};

// transformers' preparation of messages before rendering (see ChatTemplateOptions).
Result<nlohmann::ordered_json> normalize_messages_like_transformers(const nlohmann::ordered_json& messages);

}  // namespace ember::chat
