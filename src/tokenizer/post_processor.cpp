#include "tokenizer/post_processor.h"

namespace ember::tok {

namespace {
Status add(PostProcessor& p, const nlohmann::json& j) {
  if (j.is_null()) return Status::ok();
  if (!j.is_object() || !j.contains("type")) return Status::error("post_processor without a type");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    for (const auto& sub : j.value("processors", nlohmann::json::array())) EMBER_RETURN_IF_ERROR(add(p, sub));
    return Status::ok();
  }
  if (type == "ByteLevel") return Status::ok();  // only adjusts offsets
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    p.prefix = {j.at("cls").at(1).get<int32_t>()};
    p.suffix = {j.at("sep").at(1).get<int32_t>()};
    return Status::ok();
  }
  if (type == "TemplateProcessing") {
    std::vector<int32_t> prefix, suffix;
    bool seen_sequence = false;
    const auto& specials = j.value("special_tokens", nlohmann::json::object());
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken")) return Status::error("TemplateProcessing: unknown template item");
      const std::string name = item["SpecialToken"].at("id").get<std::string>();
      if (!specials.contains(name)) return Status::errorf("TemplateProcessing: special token '{}' has no ids", name);
      auto& dst = seen_sequence ? suffix : prefix;
      for (const auto& id : specials[name].at("ids")) dst.push_back(id.get<int32_t>());
    }
    p.prefix = std::move(prefix);
    p.suffix = std::move(suffix);
    return Status::ok();
  }
  return Status::errorf("unsupported post_processor type '{}' (supported: TemplateProcessing, "
                        "RobertaProcessing, BertProcessing, ByteLevel, Sequence)", type);
}
}  // namespace

Result<PostProcessor> PostProcessor::from_json(const nlohmann::json& j) {
  PostProcessor p;
  EMBER_RETURN_IF_ERROR(add(p, j));
  return p;
}

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  if (!prefix.empty()) ids.insert(ids.begin(), prefix.begin(), prefix.end());
  ids.insert(ids.end(), suffix.begin(), suffix.end());
}

}  // namespace ember::tok
