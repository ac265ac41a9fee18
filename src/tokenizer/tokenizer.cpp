#include "tokenizer/tokenizer.h"

#include "core/utf8.h"

#include <algorithm>

namespace ember {

using tok::AddedToken;
using tok::Piece;
using tok::Span;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_parts(tok::TokenizerParts parts) {
  if (!parts.model) return Status::error("tokenizer without a model");
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->parts_ = std::move(parts);
  auto& p = t->parts_;
  t->vocab_size_ = p.model->size();
  std::vector<AddedToken> raw, norm;
  std::vector<std::string> raw_pat, norm_pat;
  for (size_t i = 0; i < p.added_tokens.size(); ++i) {
    const AddedToken& a = p.added_tokens[i];
    if (a.id < 0) return Status::errorf("added token '{}' has a negative id", a.content);
    t->added_by_id_[a.id] = i;
    if (!t->added_by_content_.contains(a.content)) t->added_by_content_.put(a.content, a.id);
    t->vocab_size_ = std::max(t->vocab_size_, a.id + 1);
    if (a.normalized) {
      norm.push_back(a);
      norm_pat.push_back(p.normalizer.apply(a.content));
    } else {
      raw.push_back(a);
      raw_pat.push_back(a.content);
    }
  }
  t->raw_matcher_.build(raw, raw_pat);
  t->normalized_matcher_.build(norm, norm_pat);
  t->byte_fallback_decoding_ = p.decoder.has_byte_fallback();
  t->bos_id_ = p.bos_id;
  t->eos_id_ = p.eos_id;
  if (p.eos_id) t->eos_ids_.push_back(*p.eos_id);
  for (int32_t id : p.extra_eos_ids)
    if (id >= 0 && id < t->vocab_size_ && std::find(t->eos_ids_.begin(), t->eos_ids_.end(), id) == t->eos_ids_.end())
      t->eos_ids_.push_back(id);
  return t;
}

void Tokenizer::encode_plain(std::string_view text, bool at_origin, bool parse_special,
                             std::vector<int32_t>& out) const {
  std::string normalized = parts_.normalizer.apply(std::string(text));
  std::vector<Piece> pieces;
  if (normalized_matcher_.empty()) {
    pieces.push_back(Piece{std::move(normalized), at_origin, false});
  } else {
    std::vector<Span> spans;
    normalized_matcher_.split(normalized, !parse_special, spans);
    for (const Span& s : spans) {
      if (s.id >= 0) {
        if (!pieces.empty()) {
          parts_.pre_tokenizer.apply(pieces);
          for (const Piece& w : pieces) parts_.model->encode_word(w, out);
          pieces.clear();
        }
        out.push_back(s.id);
      } else {
        pieces.push_back(Piece{normalized.substr(s.begin, s.end - s.begin), at_origin && s.begin == 0, false});
      }
    }
  }
  parts_.pre_tokenizer.apply(pieces);
  for (const Piece& w : pieces) parts_.model->encode_word(w, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special, bool parse_special) const {
  std::string text = sanitize_utf8(input);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (raw_matcher_.empty()) {
    if (!text.empty()) encode_plain(text, true, parse_special, ids);
  } else {
    std::vector<Span> spans;
    raw_matcher_.split(text, !parse_special, spans);
    for (const Span& s : spans) {
      if (s.id >= 0) {
        ids.push_back(s.id);
      } else {
        encode_plain(std::string_view(text).substr(s.begin, s.end - s.begin), s.begin == 0, parse_special, ids);
      }
    }
  }
  if (add_special) parts_.post_processor.apply(ids);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) {
      const AddedToken& a = parts_.added_tokens[it->second];
      if (!(skip_special && a.special)) tokens.push_back(a.content);
      continue;
    }
    if (const std::string* t = parts_.model->id_to_token(id)) tokens.push_back(*t);
  }
  return parts_.decoder.decode(std::move(tokens));
}

std::vector<std::string> Tokenizer::token_bytes_table() const {
  std::vector<std::string> out(static_cast<size_t>(vocab_size_));
  for (int32_t id = 0; id < vocab_size_; ++id) {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) {
      const AddedToken& a = parts_.added_tokens[it->second];
      if (!a.special) out[static_cast<size_t>(id)] = a.content;
      continue;
    }
    if (const std::string* t = parts_.model->id_to_token(id)) out[static_cast<size_t>(id)] = parts_.decoder.token_bytes(*t);
  }
  return out;
}

std::string Tokenizer::token_piece(int32_t id) const {
  auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return parts_.added_tokens[it->second].content;
  const std::string* t = parts_.model->id_to_token(id);
  return t ? *t : std::string();
}

std::optional<int32_t> Tokenizer::token_id(std::string_view piece) const {
  if (int32_t id = added_by_content_.find(piece); id >= 0) return id;
  return parts_.model->token_to_id(piece);
}

bool Tokenizer::is_byte_fallback_token(int32_t id) const {
  if (!byte_fallback_decoding_ || added_by_id_.count(id)) return false;
  const std::string* t = parts_.model->id_to_token(id);
  return t != nullptr && tok::is_byte_token_piece(*t);
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && parts_.added_tokens[it->second].special;
}

}  // namespace ember
