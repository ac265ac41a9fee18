// Tokenizer::from_hf_dir / from_hf_json: tokenizer.json (+ tokenizer_config.json), as
// transformers' AutoTokenizer loads them.
#include "tokenizer/loader_common.h"
#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

namespace ember {

using nlohmann::json;
using namespace tok;

namespace {
Result<json> read_json(const std::string& path, bool required) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (required) return Status::errorf("cannot open {}", path);
    return json(nullptr);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::errorf("{} is not valid JSON", path);
  return j;
}

// tokenizer_config stores special tokens as a string or as {"content": ...}.
std::optional<std::string> token_string(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

Result<std::unique_ptr<BpeModel>> load_bpe(const json& m) {
  const std::string type = m.value("type", "BPE");
  if (type != "BPE")
    return Status::errorf("unsupported tokenizer model '{}' (ember supports BPE: byte-level and "
                          "SentencePiece-style)", type);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
      return Status::errorf("BPE with {} is not supported", key);
  }
  TokenIndex vocab;
  vocab.reserve(m.at("vocab").size());
  for (const auto& [tok, id] : m.at("vocab").items()) vocab.put(tok, id.get<int32_t>());
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& mg : m.value("merges", json::array())) {
    if (mg.is_string()) {
      const std::string s = mg.get<std::string>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos) return Status::errorf("merge '{}' has no space", s);
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (mg.is_array() && mg.size() == 2) {
      merges.emplace_back(mg[0].get<std::string>(), mg[1].get<std::string>());
    } else {
      return Status::error("malformed merge entry");
    }
  }
  BpeOptions opt;
  if (m.contains("unk_token") && m["unk_token"].is_string()) opt.unk_token = m["unk_token"].get<std::string>();
  opt.byte_fallback = m.value("byte_fallback", false);
  opt.fuse_unk = m.value("fuse_unk", false);
  opt.ignore_merges = m.value("ignore_merges", false);
  return BpeModel::create(std::move(vocab), merges, std::move(opt));
}
}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_dir(const std::string& dir) {
  auto tj = read_json(dir + "/tokenizer.json", true);
  if (!tj) return tj.status();
  auto cfg = read_json(dir + "/tokenizer_config.json", false);
  if (!cfg) return cfg.status();
  auto gen = read_json(dir + "/generation_config.json", false);
  if (!gen) return gen.status();
  auto t = from_hf_json(*tj, *cfg, *gen);
  if (!t) return t.status().with_context(dir + "/tokenizer.json");
  return t;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json(const json& tj, const json& config,
                                                           const json& generation_config) {
  if (!tj.is_object() || !tj.contains("model")) return Status::error("tokenizer.json has no model");
  try {
    TokenizerParts parts;
    auto model = load_bpe(tj["model"]);
    if (!model) return model.status();
    parts.model = std::move(model).value();
    auto norm = Normalizer::from_json(tj.value("normalizer", json(nullptr)));
    if (!norm) return norm.status();
    parts.normalizer = std::move(norm).value();
    auto pre = PreTokenizer::from_json(tj.value("pre_tokenizer", json(nullptr)));
    if (!pre) return pre.status();
    parts.pre_tokenizer = std::move(pre).value();
    auto dec = Decoder::from_json(tj.value("decoder", json(nullptr)));
    if (!dec) return dec.status();
    parts.decoder = std::move(dec).value();
    for (const auto& a : tj.value("added_tokens", json::array())) {
      AddedToken t;
      t.id = a.at("id").get<int32_t>();
      t.content = a.at("content").get<std::string>();
      t.single_word = a.value("single_word", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.normalized = a.value("normalized", false);
      t.special = a.value("special", false);
      parts.added_tokens.push_back(std::move(t));
    }
    auto post = PostProcessor::from_json(tj.value("post_processor", json(nullptr)));
    if (!post) return post.status();
    parts.post_processor = std::move(post).value();

    auto bos = token_string(config, "bos_token");
    auto eos = token_string(config, "eos_token");
    if (bos) parts.bos_id = find_token_id(parts, *bos);
    if (eos) parts.eos_id = find_token_id(parts, *eos);
    // BOS/EOS come from tokenizer.json's post-processor alone: transformers (5.x) loads a
    // tokenizer.json as it is and does not act on tokenizer_config's add_bos_token/add_eos_token.
    if (!parts.bos_id && !parts.post_processor.prefix.empty()) parts.bos_id = parts.post_processor.prefix.front();
    if (generation_config.is_object() && generation_config.contains("eos_token_id")) {
      const json& e = generation_config["eos_token_id"];
      if (e.is_number_integer()) parts.extra_eos_ids.push_back(e.get<int32_t>());
      if (e.is_array())
        for (const auto& x : e)
          if (x.is_number_integer()) parts.extra_eos_ids.push_back(x.get<int32_t>());
    }
    for (int32_t id : end_of_turn_ids(parts)) parts.extra_eos_ids.push_back(id);
    return from_parts(std::move(parts));
  } catch (const json::exception& e) {
    // Malformed input (a field of the wrong type) is an error, not a crash.
    return Status::errorf("malformed tokenizer.json: {}", e.what());
  }
}

}  // namespace ember
