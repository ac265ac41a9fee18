// render_template: renders a chat template file with ember, for parity checks against
// jinja2 (tests/chat/check_real_templates.py) and for looking at a template by hand.
//
//   render_template TEMPLATE_FILE INPUT_JSON
//
// INPUT_JSON holds one case {"messages": [...], "add_generation_prompt": bool,
// "bos_token": str, "eos_token": str, "extra_context": {...}, "now": unix_seconds} or a
// list of them. One case prints the rendering to stdout (exit 1 and the error on stderr
// when it fails); a list prints a JSON list of {"ok": bool, "text": str} / {"ok": false,
// "error": str}.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "chat/chat_template.h"

namespace {

using Json = nlohmann::ordered_json;

bool read_file(const char* path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

ember::Result<std::string> render_case(const ember::chat::ChatTemplate& tmpl, const Json& c) {
  ember::chat::ChatTemplateOptions options;
  options.add_generation_prompt = c.value("add_generation_prompt", false);
  options.bos_token = c.value("bos_token", std::string());
  options.eos_token = c.value("eos_token", std::string());
  if (c.contains("extra_context")) options.extra_context = c["extra_context"];
  if (c.contains("now")) options.now = static_cast<std::time_t>(c["now"].get<int64_t>());
  return tmpl.render(c.value("messages", Json::array()), options);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TEMPLATE_FILE INPUT_JSON\n", argv[0]);
    return 2;
  }
  std::string source, input_text;
  if (!read_file(argv[1], source) || !read_file(argv[2], input_text)) {
    std::fprintf(stderr, "cannot read %s or %s\n", argv[1], argv[2]);
    return 2;
  }
  Json input = Json::parse(input_text, nullptr, false);
  if (input.is_discarded()) {
    std::fprintf(stderr, "%s is not valid JSON\n", argv[2]);
    return 2;
  }
  auto tmpl = ember::chat::ChatTemplate::parse(source);
  if (input.is_array()) {
    Json out = Json::array();
    for (const auto& c : input) {
      Json r = Json::object();
      auto text = tmpl.is_ok() ? render_case(tmpl.value(), c) : ember::Result<std::string>(tmpl.status());
      r["ok"] = text.is_ok();
      if (text.is_ok()) r["text"] = text.value();
      else r["error"] = text.message();
      out.push_back(std::move(r));
    }
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    return 0;
  }
  if (!tmpl.is_ok()) {
    std::fprintf(stderr, "%s\n", tmpl.message().c_str());
    return 1;
  }
  auto text = render_case(tmpl.value(), input);
  if (!text.is_ok()) {
    std::fprintf(stderr, "%s\n", text.message().c_str());
    return 1;
  }
  std::fwrite(text.value().data(), 1, text.value().size(), stdout);
  return 0;
}
