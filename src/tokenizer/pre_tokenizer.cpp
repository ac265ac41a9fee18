#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/byte_level.h"

namespace ember::tok {

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {
struct Segment {
  size_t begin, end;
  bool is_match;
};

Result<SplitBehavior> parse_behavior(const std::string& b) {
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  return Status::errorf("unknown split behavior '{}'", b);
}

Result<PrependScheme> parse_prepend(const std::string& s) {
  if (s == "always") return PrependScheme::Always;
  if (s == "first") return PrependScheme::First;
  if (s == "never") return PrependScheme::Never;
  return Status::errorf("unknown Metaspace prepend_scheme '{}'", s);
}

// Matches and the gaps between them, covering the whole text, in order (HF's find_matches).
std::vector<Segment> segments(const Regex& re, const std::string& text, bool invert) {
  std::vector<std::pair<size_t, size_t>> m;
  re.find_all(text, m);
  std::vector<Segment> out;
  size_t pos = 0;
  for (auto [b, e] : m) {
    if (b > pos) out.push_back({pos, b, invert});
    out.push_back({b, e, !invert});
    pos = e;
  }
  if (pos < text.size()) out.push_back({pos, text.size(), invert});
  return out;
}

// Groups segments per the behavior (HF's SplitDelimiterBehavior).
std::vector<Segment> apply_behavior(std::vector<Segment> segs, SplitBehavior behavior) {
  std::vector<Segment> out;
  switch (behavior) {
    case SplitBehavior::Isolated:
      return segs;
    case SplitBehavior::Removed:
      for (const auto& s : segs)
        if (!s.is_match) out.push_back(s);
      return out;
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.is_match && !prev_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        prev_match = s.is_match;
      }
      return out;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !prev_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back(*it);
        }
        prev_match = it->is_match;
      }
      return {out.rbegin(), out.rend()};
    }
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.is_match == prev_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        prev_match = s.is_match;
      }
      return out;
    }
  }
  return segs;
}

void split_pieces(std::vector<Piece>& pieces, const Regex& re, SplitBehavior behavior, bool invert) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 4);
  for (Piece& p : pieces) {
    for (const Segment& s : apply_behavior(segments(re, p.text, invert), behavior)) {
      if (s.end <= s.begin) continue;
      out.push_back(Piece{p.text.substr(s.begin, s.end - s.begin), p.at_origin && s.begin == 0, p.byte_level});
    }
  }
  pieces.swap(out);
}

std::string replace_spaces(const std::string& s, const std::string& rep) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char c : s) {
    if (c == ' ') {
      out += rep;
    } else {
      out += c;
    }
  }
  return out;
}

void apply_metaspace(std::vector<Piece>& pieces, const PreTokenizer::Step& st) {
  std::vector<Piece> out;
  for (Piece& p : pieces) {
    std::string t = replace_spaces(p.text, st.replacement);
    bool starts = t.compare(0, st.replacement.size(), st.replacement) == 0;
    if (!t.empty() && !starts && (st.prepend == PrependScheme::Always || (st.prepend == PrependScheme::First && p.at_origin)))
      t.insert(0, st.replacement);
    if (!st.split) {
      out.push_back(Piece{std::move(t), p.at_origin, false});
      continue;
    }
    // Split before every replacement character (MergedWithNext).
    size_t begin = 0;
    for (size_t pos = t.find(st.replacement, 1); pos != std::string::npos; pos = t.find(st.replacement, pos + 1)) {
      out.push_back(Piece{t.substr(begin, pos - begin), p.at_origin && begin == 0, false});
      begin = pos;
    }
    if (begin < t.size()) out.push_back(Piece{t.substr(begin), p.at_origin && begin == 0, false});
  }
  pieces.swap(out);
}
}  // namespace

Result<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& j) {
  PreTokenizer p;
  if (j.is_null()) return p;
  EMBER_RETURN_IF_ERROR(p.add_json(j));
  return p;
}

Result<PreTokenizer> PreTokenizer::split_regex(const std::string& pattern, SplitBehavior behavior) {
  auto re = Regex::compile(pattern);
  if (!re) return re.status();
  PreTokenizer p;
  Step st{};
  st.kind = Kind::Split;
  st.regex = std::shared_ptr<const Regex>(std::move(re).value());
  st.behavior = behavior;
  p.steps_.push_back(std::move(st));
  return p;
}

Result<PreTokenizer> PreTokenizer::byte_level(bool add_prefix_space, bool use_regex) {
  PreTokenizer p;
  Step st{};
  st.kind = Kind::ByteLevel;
  st.add_prefix_space = add_prefix_space;
  if (use_regex) {
    auto re = Regex::compile(kGpt2SplitPattern);
    if (!re) return re.status();
    st.regex = std::shared_ptr<const Regex>(std::move(re).value());
  }
  p.steps_.push_back(std::move(st));
  return p;
}

PreTokenizer PreTokenizer::metaspace(std::string replacement, PrependScheme prepend, bool split) {
  PreTokenizer p;
  Step st{};
  st.kind = Kind::Metaspace;
  st.replacement = std::move(replacement);
  st.prepend = prepend;
  st.split = split;
  p.steps_.push_back(std::move(st));
  return p;
}

void PreTokenizer::append(const PreTokenizer& other) {
  steps_.insert(steps_.end(), other.steps_.begin(), other.steps_.end());
}

Status PreTokenizer::add_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("type")) return Status::error("pre_tokenizer without a type");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    for (const auto& sub : j.value("pretokenizers", nlohmann::json::array())) EMBER_RETURN_IF_ERROR(add_json(sub));
    return Status::ok();
  }
  if (type == "Split") {
    const auto& pat = j.at("pattern");
    std::string regex;
    if (pat.contains("String")) {
      regex = Regex::escape(pat["String"].get<std::string>());
    } else if (pat.contains("Regex")) {
      regex = pat["Regex"].get<std::string>();
    } else {
      return Status::error("Split pre-tokenizer without a String or Regex pattern");
    }
    auto behavior = parse_behavior(j.value("behavior", "Isolated"));
    if (!behavior) return behavior.status();
    auto p = split_regex(regex, *behavior);
    if (!p) return p.status().with_context("Split pre-tokenizer");
    p->steps_.back().invert = j.value("invert", false);
    append(*p);
    return Status::ok();
  }
  if (type == "ByteLevel") {
    auto p = byte_level(j.value("add_prefix_space", true), j.value("use_regex", true));
    if (!p) return p.status();
    append(*p);
    return Status::ok();
  }
  if (type == "Metaspace") {
    std::string scheme = j.value("prepend_scheme", "");
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";  // older files
    auto prepend = parse_prepend(scheme);
    if (!prepend) return prepend.status();
    append(metaspace(j.value("replacement", "\u2581"), *prepend, j.value("split", true)));
    return Status::ok();
  }
  if (type == "Digits") {
    auto p = split_regex(j.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", SplitBehavior::Isolated);
    if (!p) return p.status();
    append(*p);
    return Status::ok();
  }
  if (type == "WhitespaceSplit") {
    auto p = split_regex(R"(\s+)", SplitBehavior::Removed);
    if (!p) return p.status();
    append(*p);
    return Status::ok();
  }
  return Status::errorf("unsupported pre_tokenizer type '{}' (supported: Sequence, Split, ByteLevel, "
                        "Metaspace, Digits, WhitespaceSplit)", type);
}

void PreTokenizer::apply(std::vector<Piece>& pieces) const {
  const ByteLevelMap& bl = ByteLevelMap::get();
  for (const Step& st : steps_) {
    // A step after ByteLevel sees the mapped characters, as in HF.
    for (Piece& p : pieces) {
      if (p.byte_level) {
        p.text = bl.encode(p.text);
        p.byte_level = false;
      }
    }
    switch (st.kind) {
      case Kind::Split:
        split_pieces(pieces, *st.regex, st.behavior, st.invert);
        break;
      case Kind::ByteLevel:
        for (Piece& p : pieces)
          if (st.add_prefix_space && !p.text.empty() && p.text[0] != ' ') p.text.insert(0, 1, ' ');
        if (st.regex) split_pieces(pieces, *st.regex, SplitBehavior::Isolated, false);
        for (Piece& p : pieces) p.byte_level = true;
        break;
      case Kind::Metaspace:
        apply_metaspace(pieces, st);
        break;
    }
  }
  std::erase_if(pieces, [](const Piece& p) { return p.text.empty(); });
}

}  // namespace ember::tok
