#include "chat/chat_template.h"

#include <chrono>

#include "chat/parser.h"

namespace ember::chat {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  auto body = parse_template(source);
  if (!body.is_ok()) return body.status().with_context("chat template");
  ChatTemplate t;
  t.source_ = std::make_shared<const std::string>(source);
  t.body_ = std::make_shared<const Body>(std::move(body).value());
  return t;
}

Result<nlohmann::ordered_json> normalize_messages_like_transformers(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return Status::error("chat template: messages must be a list");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& message : messages) {
    if (!message.is_object())
      return Status::error("chat template: chat messages should be objects");
    nlohmann::ordered_json kept = nlohmann::ordered_json::object();
    for (const auto& [key, value] : message.items())
      if (!value.is_null()) kept[key] = value;
    // {"thinking": r, **message, "reasoning_content": r} for the first reasoning field set.
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
      auto it = kept.find(field);
      if (it != kept.end()) {
        reasoning = &*it;
        break;
      }
    }
    if (reasoning) {
      nlohmann::ordered_json r = *reasoning;
      nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
      aliased["thinking"] = r;
      for (const auto& [key, value] : kept.items()) aliased[key] = value;
      aliased["reasoning_content"] = r;
      kept = std::move(aliased);
    }
    out.push_back(std::move(kept));
  }
  return out;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         const ChatTemplateOptions& options) const {
  nlohmann::ordered_json prepared;
  if (options.normalize_messages) {
    EMBER_ASSIGN_OR_RETURN(prepared, normalize_messages_like_transformers(messages));
  } else {
    if (!messages.is_array()) return Status::error("chat template: messages must be a list");
    prepared = messages;
  }
  if (!options.extra_context.is_object()) return Status::error("chat template: extra_context must be an object");
  auto globals = std::make_shared<Frame>();
  add_builtin_globals(*globals);
  auto set_json = [&](const std::string& name, const nlohmann::ordered_json& j) -> Status {
    auto v = from_json(j);
    if (!v.is_ok()) return v.status().with_context("chat template");
    globals->set(name, std::move(v).value());
    return Status::ok();
  };
  EMBER_RETURN_IF_ERROR(set_json("messages", prepared));
  globals->set("tools", Value::none());
  globals->set("documents", Value::none());
  globals->set("add_generation_prompt", Value(options.add_generation_prompt));
  if (!options.bos_token.empty()) globals->set("bos_token", Value(options.bos_token));
  if (!options.eos_token.empty()) globals->set("eos_token", Value(options.eos_token));
  for (const auto& [key, value] : options.extra_context.items()) EMBER_RETURN_IF_ERROR(set_json(key, value));

  std::time_t now = options.now ? *options.now : std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  Interpreter interp(options.limits, now);
  auto result = interp.render(*body_, globals);
  if (!result.is_ok() && !interp.raised()) return result.status().with_context("chat template");
  return result;
}

}  // namespace ember::chat
