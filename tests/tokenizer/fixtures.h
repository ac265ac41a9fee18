#pragma once
// Loading the committed tokenizer fixtures (tests/fixtures/tokenizer) for the tests.
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace ember::test {

std::string fixture_dir();  // tests/fixtures/tokenizer
nlohmann::json read_json_file(const std::string& path);

struct CorpusEntry {
  std::string name;
  std::string bytes;  // may be invalid UTF-8
};
const std::vector<CorpusEntry>& corpus();

// Loads the tokenizer an expected/<name>.json describes: its "source" is tiny/<dir> (a HF
// directory) or tiny/<file>.gguf / <model>/<file> (GGUF, read through WeightSource).
Result<std::unique_ptr<Tokenizer>> load_tokenizer_for(const nlohmann::json& expected);
// Names of expected/*.json files whose name starts with prefix ("real_" or not).
std::vector<std::string> expected_files(bool real);

// Where get-models.sh puts a model: $EMBER_MODELS or ~/.cache/ember/models.
std::string models_dir();

}  // namespace ember::test
