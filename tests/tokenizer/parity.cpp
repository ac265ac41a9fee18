#include "parity.h"

#include "fixtures.h"
#include "core/utf8.h"

#include <gtest/gtest.h>

#include <map>

namespace ember::test {

namespace {
std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}
}  // namespace

void expect_parity(const nlohmann::json& expected, const Tokenizer& tok) {
  std::map<std::string, std::string> text_of;
  for (const auto& e : corpus()) text_of[e.name] = e.bytes;
  EXPECT_EQ(tok.vocab_size(), expected["vocab_size"].get<int32_t>());
  for (const auto& c : expected["cases"]) {
    const std::string name = c["name"].get<std::string>();
    ASSERT_TRUE(text_of.count(name)) << "corpus has no " << name;
    const std::string& text = text_of[name];
    SCOPED_TRACE("case " + name + ": \"" + printable(text) + "\"");
    EXPECT_EQ(tok.encode(text, true), ids_of(c["ids"]));
    EXPECT_EQ(tok.encode(text, false), ids_of(c["ids_plain"]));
    if (c.contains("ids_noparse")) {
      EXPECT_EQ(tok.encode(text, false, false), ids_of(c["ids_noparse"]));
    }
    EXPECT_EQ(tok.decode(ids_of(c["ids_plain"])), c["decoded"].get<std::string>());
    EXPECT_EQ(tok.decode(ids_of(c["ids"])), c["decoded_ids"].get<std::string>());
    EXPECT_EQ(tok.decode(ids_of(c["ids"]), true), c["decoded_skip"].get<std::string>());
  }
  for (const auto& [id, piece] : expected["pieces"].items()) {
    std::string want = piece.is_null() ? std::string() : piece.get<std::string>();
    EXPECT_EQ(tok.token_piece(std::stoi(id)), want) << "piece of id " << id;
  }
  for (const auto& id : expected["special_ids"]) EXPECT_TRUE(tok.is_special(id.get<int32_t>())) << "id " << id;
}

void expect_incremental_parity(const nlohmann::json& expected, const Tokenizer& tok) {
  for (const auto& c : expected["cases"]) {
    SCOPED_TRACE("case " + c["name"].get<std::string>());
    for (bool skip : {false, true}) {
      IncrementalDetokenizer detok(tok, skip);
      std::string all;
      for (int32_t id : ids_of(c["ids"])) {
        std::string chunk = detok.push(id);
        EXPECT_TRUE(is_valid_utf8(chunk)) << "broken UTF-8 after id " << id;
        all += chunk;
      }
      std::string rest = detok.flush();
      EXPECT_TRUE(is_valid_utf8(rest));
      all += rest;
      EXPECT_EQ(all, c[skip ? "decoded_skip" : "decoded_ids"].get<std::string>()) << "skip_special=" << skip;
    }
  }
}

void expect_token_bytes_parity(const nlohmann::json& expected, const Tokenizer& tok) {
  const std::vector<std::string> table = tok.token_bytes_table();
  ASSERT_EQ(table.size(), static_cast<size_t>(tok.vocab_size()));
  for (const auto& c : expected["cases"]) {
    SCOPED_TRACE("case " + c["name"].get<std::string>());
    std::string joined;
    for (int32_t id : ids_of(c["ids"])) {
      ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
      EXPECT_EQ(table[static_cast<size_t>(id)].empty(), tok.is_special(id) || tok.token_piece(id).empty()) << id;
      joined += table[static_cast<size_t>(id)];
    }
    const std::string text = sanitize_utf8(joined);
    const std::string want = c["decoded_skip"].get<std::string>();
    // want is text with some spaces left out: the decoders drop a text's leading space, and
    // HF's Metaspace every replacement character of its first token (which only ever removes
    // whitespace, so a JSON text stays valid JSON either way).
    size_t i = 0, j = 0;
    while (i < text.size()) {
      if (j < want.size() && text[i] == want[j]) ++j;
      else if (text[i] != ' ') break;
      ++i;
    }
    EXPECT_TRUE(i == text.size() && j == want.size()) << printable(text) << " vs HF " << printable(want);
  }
}

}  // namespace ember::test
