#include "server/chat_template_source.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ember::server {

namespace {

namespace fs = std::filesystem;

Result<std::string> read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return Status::errorf("cannot read {}", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tokenizer_config.json style: "chat_template" is a string or [{"name", "template"}].
Result<std::string> template_from_value(const nlohmann::json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    for (const auto& t : v)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
        return t["template"].get<std::string>();
    return Status::errorf("{}: chat_template list has no \"default\" template", where);
  }
  return Status::errorf("{}: chat_template is neither a string nor a list", where);
}

}  // namespace

Result<std::string> find_chat_template(const WeightSource& source) {
  const nlohmann::json& md = source.metadata();
  if (source.format() == CheckpointFormat::GGUF) {
    auto it = md.find("tokenizer.chat_template");
    if (it != md.end() && it->is_string()) return it->get<std::string>();
    return Status::error("the GGUF file has no tokenizer.chat_template");
  }
  const fs::path dir(source.path());
  if (fs::exists(dir / "chat_template.jinja")) return read_text(dir / "chat_template.jinja");
  if (fs::exists(dir / "chat_template.json")) return read_chat_template_file((dir / "chat_template.json").string());
  auto tc = md.find("tokenizer_config");
  if (tc != md.end() && tc->is_object() && tc->contains("chat_template"))
    return template_from_value((*tc)["chat_template"], "tokenizer_config.json");
  return Status::error("the checkpoint has no chat template (chat_template.jinja or tokenizer_config.json)");
}

Result<std::string> read_chat_template_file(const std::string& path) {
  EMBER_ASSIGN_OR_RETURN(std::string text, read_text(path));
  if (fs::path(path).extension() == ".json") {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("chat_template"))
      return Status::errorf("{}: expected a JSON object with \"chat_template\"", path);
    return template_from_value(j["chat_template"], path);
  }
  return text;
}

}  // namespace ember::server
