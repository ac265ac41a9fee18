#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"
#include "core/utf8.h"

namespace ember::tok {

namespace {
void replace_in(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// "<0xNN>" -> NN, else -1.
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    char c = t[i];
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

void decode_byte_level(std::vector<std::string>& tokens) {
  // All tokens' bytes are joined before the UTF-8 check, so a character split across tokens
  // decodes whole; a token with a character outside the byte map contributes its raw bytes.
  const ByteLevelMap& bl = ByteLevelMap::get();
  std::string bytes;
  for (const auto& t : tokens) {
    size_t mark = bytes.size();
    if (!bl.decode(t, bytes)) {
      bytes.resize(mark);
      bytes += t;
    }
  }
  tokens.assign(1, sanitize_utf8(bytes));
}

void decode_byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string pending;
  size_t n_pending = 0;
  auto flush = [&] {
    if (n_pending == 0) return;
    if (is_valid_utf8(pending)) {
      out.push_back(pending);
    } else {
      for (size_t i = 0; i < n_pending; ++i) out.emplace_back("\xEF\xBF\xBD");  // one U+FFFD per byte, as HF
    }
    pending.clear();
    n_pending = 0;
  };
  for (auto& t : tokens) {
    int v = byte_token_value(t);
    if (v >= 0) {
      pending.push_back(static_cast<char>(v));
      ++n_pending;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

void strip_tokens(std::vector<std::string>& tokens, const std::string& content, size_t start, size_t stop) {
  for (auto& t : tokens) {
    // Up to `start` leading and `stop` trailing copies of `content`, counted in characters.
    size_t b = 0;
    for (size_t i = 0; i < start && t.compare(b, content.size(), content) == 0 && b < t.size(); ++i) b += content.size();
    size_t e = t.size();
    for (size_t i = 0; i < stop && e >= b + content.size() && t.compare(e - content.size(), content.size(), content) == 0; ++i)
      e -= content.size();
    t = t.substr(b, e - b);
  }
}
}  // namespace

Decoder::Step Decoder::step(Kind kind, std::string pattern, std::string content) {
  Step s;
  s.kind = kind;
  s.pattern = std::move(pattern);
  s.content = std::move(content);
  return s;
}

Result<Decoder> Decoder::from_json(const nlohmann::json& j) {
  Decoder d;
  if (j.is_null()) return d;
  d.none_ = false;
  EMBER_RETURN_IF_ERROR(d.add_json(j));
  return d;
}

Decoder Decoder::byte_level() {
  Decoder d;
  d.none_ = false;
  d.steps_.push_back(step(Kind::ByteLevel));
  return d;
}

Decoder Decoder::sentencepiece(bool strip_leading_space) {
  Decoder d;
  d.none_ = false;
  d.steps_.push_back(step(Kind::Replace, "\u2581", " "));
  d.steps_.push_back(step(Kind::ByteFallback));
  d.steps_.push_back(step(Kind::Fuse));
  if (strip_leading_space) {
    Step s = step(Kind::Strip, "", " ");
    s.start = 1;
    d.steps_.push_back(s);
  }
  return d;
}

Status Decoder::add_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("type")) return Status::error("decoder without a type");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    for (const auto& sub : j.value("decoders", nlohmann::json::array())) EMBER_RETURN_IF_ERROR(add_json(sub));
    return Status::ok();
  }
  Step st = step(Kind::Fuse);
  if (type == "ByteLevel") {
    st.kind = Kind::ByteLevel;
  } else if (type == "Replace") {
    st.kind = Kind::Replace;
    const auto& pat = j.at("pattern");
    if (!pat.contains("String")) return Status::error("Replace decoder: only String patterns are supported");
    st.pattern = pat["String"].get<std::string>();
    st.content = j.value("content", "");
  } else if (type == "ByteFallback") {
    st.kind = Kind::ByteFallback;
  } else if (type == "Fuse") {
    st.kind = Kind::Fuse;
  } else if (type == "Strip") {
    st.kind = Kind::Strip;
    st.content = j.value("content", " ");
    st.start = j.value("start", size_t{0});
    st.stop = j.value("stop", size_t{0});
  } else if (type == "Metaspace") {
    st.kind = Kind::Metaspace;
    st.content = j.value("replacement", "\u2581");
    std::string scheme = j.value("prepend_scheme", "");
    st.prepend_first = scheme.empty() ? j.value("add_prefix_space", true) : scheme != "never";
  } else {
    return Status::errorf("unsupported decoder type '{}' (supported: Sequence, ByteLevel, Replace, "
                          "ByteFallback, Fuse, Strip, Metaspace)", type);
  }
  steps_.push_back(std::move(st));
  return Status::ok();
}

std::string Decoder::token_bytes(std::string token) const {
  if (none_) return " " + token;  // HF joins undecoded tokens with spaces
  bool fused = false;
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::ByteLevel: {
        std::string bytes;
        if (ByteLevelMap::get().decode(token, bytes)) token = std::move(bytes);  // else its raw bytes, as decode()
        break;
      }
      case Kind::Replace: replace_in(token, st.pattern, st.content); break;
      case Kind::ByteFallback:
        if (const int v = byte_token_value(token); v >= 0) token.assign(1, static_cast<char>(v));
        break;
      case Kind::Fuse: fused = true; break;
      case Kind::Strip:
        // After Fuse there is one string, the whole text: its strip touches only the text's
        // ends, not a token in the middle.
        if (!fused) {
          std::vector<std::string> one{std::move(token)};
          strip_tokens(one, st.content, st.start, st.stop);
          token = std::move(one[0]);
        }
        break;
      case Kind::Metaspace: replace_in(token, st.content, " "); break;
    }
  }
  return token;
}

bool Decoder::has_byte_fallback() const {
  for (const Step& st : steps_)
    if (st.kind == Kind::ByteFallback) return true;
  return false;
}

bool is_byte_token_piece(const std::string& piece) { return byte_token_value(piece) >= 0; }

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (none_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return sanitize_utf8(out);
  }
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::ByteLevel: decode_byte_level(tokens); break;
      case Kind::Replace:
        for (auto& t : tokens) replace_in(t, st.pattern, st.content);
        break;
      case Kind::ByteFallback: decode_byte_fallback(tokens); break;
      case Kind::Fuse: {
        std::string all;
        for (auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Kind::Strip: strip_tokens(tokens, st.content, st.start, st.stop); break;
      case Kind::Metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string& t = tokens[i];
          // HF drops every replacement character of the first token, not only a leading one.
          replace_in(t, st.content, (i == 0 && st.prepend_first) ? "" : " ");
        }
        break;
    }
  }
  std::string out;
  for (auto& t : tokens) out += t;
  return sanitize_utf8(out);
}

}  // namespace ember::tok
