#include "tokenizer/normalizer.h"

#include "core/utf8.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/locid.h>

namespace ember::tok {

namespace {
bool is_ascii(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (;;) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  if (pos == 0) return s;
  out.append(s, pos, std::string::npos);
  return out;
}

std::string unicode_normalize(const std::string& s, Normalizer::Kind kind) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (kind) {
    case Normalizer::Kind::NFC: n = icu::Normalizer2::getNFCInstance(err); break;
    case Normalizer::Kind::NFD: n = icu::Normalizer2::getNFDInstance(err); break;
    case Normalizer::Kind::NFKC: n = icu::Normalizer2::getNFKCInstance(err); break;
    default: n = icu::Normalizer2::getNFKDInstance(err); break;
  }
  if (U_FAILURE(err) || n == nullptr) return s;  // ICU data missing: leave the text as it is
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (n->isNormalized(u, err) && U_SUCCESS(err)) return s;
  err = U_ZERO_ERROR;
  icu::UnicodeString out = n->normalize(u, err);
  if (U_FAILURE(err)) return s;
  std::string r;
  out.toUTF8String(r);
  return r;
}

std::string strip(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t p = b;
      if (!is_unicode_whitespace(next_code_point(s, p))) break;
      b = p;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t p = start;
      if (!is_unicode_whitespace(next_code_point(s, p))) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}
}  // namespace

Result<Normalizer> Normalizer::from_json(const nlohmann::json& j) {
  Normalizer n;
  if (j.is_null()) return n;
  EMBER_RETURN_IF_ERROR(n.add_json(j));
  return n;
}

Status Normalizer::add_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("type")) return Status::error("normalizer without a type");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    for (const auto& sub : j.value("normalizers", nlohmann::json::array())) EMBER_RETURN_IF_ERROR(add_json(sub));
    return Status::ok();
  }
  Step st{};
  if (type == "Replace") {
    st.kind = Kind::Replace;
    const auto& pat = j.at("pattern");
    st.content = j.value("content", "");
    if (pat.contains("String")) {
      st.pattern = pat["String"].get<std::string>();
    } else if (pat.contains("Regex")) {
      auto re = Regex::compile(pat["Regex"].get<std::string>());
      if (!re) return re.status().with_context("Replace normalizer");
      st.regex = std::shared_ptr<const Regex>(std::move(re).value());
    } else {
      return Status::error("Replace normalizer without a String or Regex pattern");
    }
  } else if (type == "Prepend") {
    st.kind = Kind::Prepend;
    st.content = j.value("prepend", "");
  } else if (type == "NFC") {
    st.kind = Kind::NFC;
  } else if (type == "NFD") {
    st.kind = Kind::NFD;
  } else if (type == "NFKC") {
    st.kind = Kind::NFKC;
  } else if (type == "NFKD") {
    st.kind = Kind::NFKD;
  } else if (type == "Lowercase") {
    st.kind = Kind::Lowercase;
  } else if (type == "Strip") {
    st.kind = Kind::Strip;
    st.strip_left = j.value("strip_left", true);
    st.strip_right = j.value("strip_right", true);
  } else {
    return Status::errorf("unsupported normalizer type '{}' (supported: Sequence, Replace, Prepend, "
                          "NFC, NFD, NFKC, NFKD, Lowercase, Strip)", type);
  }
  steps_.push_back(std::move(st));
  return Status::ok();
}

Normalizer Normalizer::replace(std::string pattern, std::string content) {
  Normalizer n;
  Step st{};
  st.kind = Kind::Replace;
  st.pattern = std::move(pattern);
  st.content = std::move(content);
  n.steps_.push_back(std::move(st));
  return n;
}

Normalizer Normalizer::prepend(std::string content) {
  Normalizer n;
  Step st{};
  st.kind = Kind::Prepend;
  st.content = std::move(content);
  n.steps_.push_back(std::move(st));
  return n;
}

void Normalizer::append(const Normalizer& other) {
  steps_.insert(steps_.end(), other.steps_.begin(), other.steps_.end());
}

std::string Normalizer::apply(std::string s) const {
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::Replace:
        if (st.regex) {
          std::vector<std::pair<size_t, size_t>> m;
          st.regex->find_all(s, m);
          if (m.empty()) break;
          std::string out;
          size_t pos = 0;
          for (auto [b, e] : m) {
            out.append(s, pos, b - pos);
            out += st.content;
            pos = e;
          }
          out.append(s, pos, std::string::npos);
          s = std::move(out);
        } else {
          s = replace_all(s, st.pattern, st.content);
        }
        break;
      case Kind::Prepend:
        if (!s.empty()) s.insert(0, st.content);  // HF prepends nothing to an empty piece
        break;
      case Kind::NFC: case Kind::NFD: case Kind::NFKC: case Kind::NFKD:
        if (!is_ascii(s)) s = unicode_normalize(s, st.kind);
        break;
      case Kind::Lowercase: {
        if (is_ascii(s)) {
          for (char& c : s)
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        } else {
          icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
          u.toLower(icu::Locale::getRoot());
          s.clear();
          u.toUTF8String(s);
        }
        break;
      }
      case Kind::Strip:
        s = strip(s, st.strip_left, st.strip_right);
        break;
    }
  }
  return s;
}

}  // namespace ember::tok
