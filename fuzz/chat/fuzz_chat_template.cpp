// libFuzzer target: arbitrary template source rendered over fixed messages must not
// crash, hang or leak. Tight limits keep each input cheap; errors are expected results.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/chat_template.h"

namespace {

const nlohmann::ordered_json& fixed_messages() {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Héllo 🎉 <tag> \"quoted\""},
    {"role": "assistant", "content": null, "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": [1.5, true, null]}}}]},
    {"role": "tool", "content": "{\"ok\": true}"},
    {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}
  ])");
  return messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = ember::chat::ChatTemplate::parse(source);
  if (!tmpl.is_ok()) return 0;
  ember::chat::ChatTemplateOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.now = 1735732800;
  options.extra_context = nlohmann::ordered_json::parse(R"({"tools": [{"type": "function", "function": {"name": "f"}}]})");
  options.limits.max_steps = 200000;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_call_depth = 40;
  for (bool generation_prompt : {true, false}) {
    options.add_generation_prompt = generation_prompt;
    (void)tmpl->render(fixed_messages(), options);
  }
  return 0;
}
