// libFuzzer target: arbitrary bytes through the tokenizers of the committed tiny fixtures.
// - Never crashes (ASan/UBSan on).
// - Byte-level BPE (lossless: no normalizer): decode(encode(x)) == x for valid UTF-8, and ==
//   x with ill-formed sequences replaced by U+FFFD otherwise; with and without special-token
//   parsing.
// - SentencePiece-style BPE: encodes and decodes without crashing; ids stay in the vocabulary.
// - The incremental detokenizer adds up to decode() and only ever emits valid UTF-8.
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace {

struct Tokenizers {
  std::unique_ptr<ember::Tokenizer> llama3, gpt2, spm, gemma;
};

std::unique_ptr<ember::Tokenizer> load(const char* name) {
  auto t = ember::Tokenizer::from_hf_dir(std::string(EMBER_TOKENIZER_FIXTURES) + "/tiny/" + name);
  if (!t) {
    std::fprintf(stderr, "fuzz_tokenizer: %s\n", t.message().c_str());
    std::abort();
  }
  return std::move(t).value();
}

const Tokenizers& tokenizers() {
  static const Tokenizers t{load("bpe_llama3"), load("bpe_gpt2"), load("spm_llama2"), load("spm_gemma")};
  return t;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_tokenizer: property failed: %s\n", what);
    std::abort();
  }
}

void check_stream(const ember::Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  ember::IncrementalDetokenizer d(tok, skip);
  std::string all;
  for (int32_t id : ids) {
    std::string chunk = d.push(id);
    check(ember::is_valid_utf8(chunk), "incremental chunk is valid UTF-8");
    all += chunk;
  }
  all += d.flush();
  check(all == tok.decode(ids, skip), "incremental detokenizer adds up to decode()");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizers& t = tokenizers();
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string expected = ember::sanitize_utf8(input);
  for (const ember::Tokenizer* bl : {t.llama3.get(), t.gpt2.get()}) {
    for (bool parse_special : {true, false}) {
      auto ids = bl->encode(input, false, parse_special);
      check(bl->decode(ids) == expected, "byte-level round trip");
      for (int32_t id : ids) check(id >= 0 && id < bl->vocab_size(), "id in vocabulary");
    }
    check_stream(*bl, bl->encode(input, true), size % 2 == 0);
  }
  for (const ember::Tokenizer* sp : {t.spm.get(), t.gemma.get()}) {
    auto ids = sp->encode(input, true, size % 3 != 0);
    for (int32_t id : ids) check(id >= 0 && id < sp->vocab_size(), "id in vocabulary");
    check(ember::is_valid_utf8(sp->decode(ids, size % 2 == 0)), "decode is valid UTF-8");
    check_stream(*sp, ids, size % 2 == 1);
  }
  // Arbitrary ids (in and out of range) must decode without crashing.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 1 < size && raw.size() < 64; i += 2) raw.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)) - 64);
  check(ember::is_valid_utf8(t.spm->decode(raw)), "decode of arbitrary ids is valid UTF-8");
  check_stream(*t.gpt2, raw, false);
  return 0;
}
