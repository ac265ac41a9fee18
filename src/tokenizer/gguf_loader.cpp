// Tokenizer::from_gguf_metadata: the tokenizer a GGUF file describes (tokenizer.ggml.*), built the
// way transformers builds it from the same file (integrations/gguf), which is the HF oracle for
// GGUF tokenizers.
#include "tokenizer/byte_level.h"
#include "tokenizer/loader_common.h"
#include "tokenizer/merge_gen.h"
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"

#include <map>

namespace ember {

using nlohmann::json;
using namespace tok;

namespace {
// Llama 3, Qwen2 and GPT-4o style splits of the GGUF "pre" names transformers knows.
const char* const kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kTekkenSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt4oSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* split_for_pre(const std::string& pre) {
  static const std::map<std::string, const char*> kSplits = {
      {"llama3", kLlama3Split},  {"llama-v3", kLlama3Split},     {"llama-bpe", kLlama3Split},
      {"falcon3", kLlama3Split}, {"falcon-h1", kLlama3Split},    {"pixtral", kLlama3Split},
      {"midm-2.0", kLlama3Split}, {"lfm2", kLlama3Split},        {"jina-v5-nano", kLlama3Split},
      {"dbrx", kLlama3Split},    {"smaug-bpe", kLlama3Split},    {"tekken", kTekkenSplit},
      {"qwen2", kQwen2Split},    {"deepseek-r1-qwen", kQwen2Split}, {"kormo", kQwen2Split},
      {"f2llmv2", kQwen2Split},  {"megrez", kQwen2Split},        {"gpt-4o", kGpt4oSplit},
      {"llama4", kGpt4oSplit},   {"kanana2", kGpt4oSplit},       {"talkie", kGpt4oSplit},
      {"minimax-m2", kGpt4oSplit},
  };
  auto it = kSplits.find(pre);
  return it == kSplits.end() ? nullptr : it->second;
}

enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

std::optional<int64_t> get_int(const json& md, const char* key) {
  if (!md.contains(key) || !md[key].is_number_integer()) return std::nullopt;
  return md[key].get<int64_t>();
}

// Python's str.isspace for one code point (what transformers' Gemma respelling tests).
bool py_isspace(char32_t cp) { return is_unicode_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

// Gemma files store runs of spaces as spaces; its vocabulary spells them with ▁.
std::string gemma_respell(const std::string& t) {
  if (t.find(' ') == std::string::npos) return t;
  size_t pos = 0, n = 0;
  while (pos < t.size()) {
    if (!py_isspace(next_code_point(t, pos))) return t;
    ++n;
  }
  std::string out;
  for (size_t i = 0; i < n; ++i) out += "\u2581";
  return out;
}

bool in_byte_alphabet(const std::string& t) {
  const ByteLevelMap& bl = ByteLevelMap::get();
  size_t pos = 0;
  while (pos < t.size())
    if (bl.decode_code_point(next_code_point(t, pos)) < 0) return false;
  return true;
}

Result<std::vector<std::pair<std::string, std::string>>> file_merges(const json& md) {
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& m : md["tokenizer.ggml.merges"]) {
    if (!m.is_string()) return Status::error("tokenizer.ggml.merges holds a non-string");
    const std::string s = m.get<std::string>();
    size_t sp = s.find(' ');
    if (sp == std::string::npos) return Status::errorf("merge '{}' has no space", s);
    merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
  }
  return merges;
}
}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf_metadata(const json& md) {
  try {
    if (!md.is_object() || !md.contains("tokenizer.ggml.model"))
      return Status::error("GGUF metadata has no tokenizer (tokenizer.ggml.model missing)");
    const std::string type = md["tokenizer.ggml.model"].get<std::string>();
    const std::string arch = md.value("general.architecture", "");
    const std::string pre = md.contains("tokenizer.ggml.pre") ? md["tokenizer.ggml.pre"].get<std::string>() : "";
    if (type != "gpt2" && type != "llama")
      return Status::errorf("unsupported GGUF tokenizer model '{}' (supported: gpt2, llama)", type);
    if (!md.contains("tokenizer.ggml.tokens") || !md["tokenizer.ggml.tokens"].is_array())
      return Status::error("GGUF metadata has no tokenizer.ggml.tokens array");
    const auto& jt = md["tokenizer.ggml.tokens"];
    std::vector<std::string> file_tokens;
    file_tokens.reserve(jt.size());
    for (const auto& t : jt) file_tokens.push_back(t.get<std::string>());
    const size_t n = file_tokens.size();
    std::vector<int> types(n, kNormal);
    if (md.contains("tokenizer.ggml.token_type")) {
      const auto& tt = md["tokenizer.ggml.token_type"];
      if (tt.size() != n) return Status::error("tokenizer.ggml.token_type and tokens differ in length");
      for (size_t i = 0; i < n; ++i) types[i] = tt[i].get<int>();
    }
    const bool gemma = type == "llama" && (arch == "gemma" || arch == "gemma2" || arch == "gemma3");
    const bool byte_level = type == "gpt2";

    // The vocabulary as transformers spells it.
    std::vector<std::string> tokens = file_tokens;
    const ByteLevelMap& bl = ByteLevelMap::get();
    for (auto& t : tokens) {
      if (byte_level && !in_byte_alphabet(t)) t = bl.encode(t);
      if (gemma) t = gemma_respell(t);
    }
    TokenIndex vocab;
    vocab.reserve(n);
    for (size_t i = 0; i < n; ++i) vocab.put(tokens[i], static_cast<int32_t>(i));

    std::vector<std::pair<std::string, std::string>> merges;
    std::vector<MergeIds> merge_ids;
    const bool has_merges = md.contains("tokenizer.ggml.merges");
    if (has_merges) {
      auto fm = file_merges(md);
      if (!fm) return fm.status();
      merges = std::move(fm).value();
    } else {
      // No merges in the file: recover them from the vocabulary, ordered by score (Gemma: by
      // position, since its scores do not follow merge order; gpt2: by id, ascending).
      std::vector<double> scores(n);
      bool descending = true;
      if (gemma || type == "gpt2") {
        for (size_t i = 0; i < n; ++i) scores[i] = gemma ? -static_cast<double>(i) : static_cast<double>(i);
        descending = gemma;
      } else {
        const auto& js = md.value("tokenizer.ggml.scores", json::array());
        if (js.size() != n) return Status::error("tokenizer.ggml.scores missing or of the wrong length");
        for (size_t i = 0; i < n; ++i) scores[i] = js[i].get<double>();
      }
      merge_ids = generate_merges(tokens, scores, vocab, descending);
    }

    TokenizerParts parts;
    BpeOptions opt;
    if (type == "llama") {
      opt.byte_fallback = true;
      opt.fuse_unk = true;
      if (gemma) {
        auto unk = get_int(md, "tokenizer.ggml.unknown_token_id");
        opt.unk_token = unk && *unk >= 0 && static_cast<size_t>(*unk) < n ? file_tokens[*unk] : "<unk>";
      }
    }
    auto model = has_merges ? BpeModel::create(std::move(vocab), merges, std::move(opt))
                            : BpeModel::create(std::move(vocab), merge_ids, std::move(opt));
    if (!model) return model.status().with_context("GGUF tokenizer");
    parts.model = std::move(model).value();

    if (byte_level) {
      const char* split = split_for_pre(pre);
      Result<PreTokenizer> p = split ? PreTokenizer::split_regex(split, SplitBehavior::Isolated)
                                     : PreTokenizer::byte_level(false, true);
      if (!p) return p.status();
      if (split) {
        auto b = PreTokenizer::byte_level(false, false);
        if (!b) return b.status();
        p->append(*b);
      }
      parts.pre_tokenizer = std::move(p).value();
      parts.decoder = Decoder::byte_level();
    } else if (gemma) {
      parts.normalizer = Normalizer::replace(" ", "\u2581");
      auto p = PreTokenizer::split_regex(" ", SplitBehavior::MergedWithPrevious);
      if (!p) return p.status();
      parts.pre_tokenizer = std::move(p).value();
      parts.decoder = Decoder::sentencepiece(false);
    } else if (arch == "phi3") {
      parts.normalizer = Normalizer::prepend("\u2581");
      parts.normalizer.append(Normalizer::replace(" ", "\u2581"));
      parts.decoder = Decoder::sentencepiece(true);
    } else {
      parts.pre_tokenizer = PreTokenizer::metaspace("\u2581", PrependScheme::First, false);
      parts.decoder = Decoder::sentencepiece(true);
    }

    // Added tokens: the special ids the file names, control tokens (special) and user-defined
    // tokens (not special), all matched whole in raw text. Ids stay those of the file.
    std::vector<bool> added(n, false);
    auto add = [&](size_t i, bool special) {
      if (i >= n || added[i]) return;
      if (parts.model->token_to_id(file_tokens[i]) != static_cast<int32_t>(i)) return;  // respelled away
      added[i] = true;
      AddedToken a;
      a.id = static_cast<int32_t>(i);
      a.content = file_tokens[i];
      a.special = special;
      parts.added_tokens.push_back(std::move(a));
    };
    for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                            "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"}) {
      if (auto id = get_int(md, key); id && *id >= 0) add(static_cast<size_t>(*id), true);
    }
    for (size_t i = 0; i < n; ++i)
      if (types[i] == kControl && (!byte_level || in_byte_alphabet(file_tokens[i]))) add(i, true);
    for (size_t i = 0; i < n; ++i)
      if (types[i] == kUserDefined) add(i, false);
    std::sort(parts.added_tokens.begin(), parts.added_tokens.end(),
              [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });

    auto bos = get_int(md, "tokenizer.ggml.bos_token_id");
    auto eos = get_int(md, "tokenizer.ggml.eos_token_id");
    if (bos && *bos >= 0 && static_cast<size_t>(*bos) < n) parts.bos_id = static_cast<int32_t>(*bos);
    if (eos && *eos >= 0 && static_cast<size_t>(*eos) < n) parts.eos_id = static_cast<int32_t>(*eos);
    // llama.cpp (and transformers after it) adds BOS to a SentencePiece vocabulary unless told not to.
    const bool add_bos = md.value("tokenizer.ggml.add_bos_token", type == "llama");
    const bool add_eos = md.value("tokenizer.ggml.add_eos_token", false);
    if (add_bos && parts.bos_id) parts.post_processor.prefix = {*parts.bos_id};
    if (add_eos && parts.eos_id) parts.post_processor.suffix = {*parts.eos_id};
    for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
      if (auto id = get_int(md, key); id && *id >= 0) parts.extra_eos_ids.push_back(static_cast<int32_t>(*id));
    }
    for (int32_t id : end_of_turn_ids(parts)) parts.extra_eos_ids.push_back(id);
    return from_parts(std::move(parts));
  } catch (const json::exception& e) {
    return Status::errorf("malformed GGUF tokenizer metadata: {}", e.what());
  }
}

}  // namespace ember
