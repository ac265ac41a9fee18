#include "fixtures.h"

#include "loader/weight_source.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ember::test {

namespace fs = std::filesystem;

std::string fixture_dir() { return EMBER_TOKENIZER_FIXTURES; }

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

static std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

const std::vector<CorpusEntry>& corpus() {
  static const std::vector<CorpusEntry> entries = [] {
    std::vector<CorpusEntry> v;
    for (const auto& e : read_json_file(fixture_dir() + "/hard_strings.json"))
      v.push_back({e["name"].get<std::string>(), from_hex(e["hex"].get<std::string>())});
    return v;
  }();
  return entries;
}

std::string models_dir() {
  if (const char* m = std::getenv("EMBER_MODELS"); m && *m) return m;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/ember/models";
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer_for(const nlohmann::json& expected) {
  const std::string source = expected["source"].get<std::string>();
  std::string path;
  if (expected.contains("model")) {
    path = models_dir() + "/" + source;
  } else {
    path = fixture_dir() + "/" + source;
  }
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") {
    auto ws = WeightSource::open(path);
    if (!ws) return ws.status();
    return Tokenizer::from_weight_source(**ws);
  }
  return Tokenizer::from_hf_dir(path);
}

std::vector<std::string> expected_files(bool real) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fixture_dir() + "/expected")) {
    std::string name = e.path().filename().string();
    if (e.path().extension() != ".json") continue;
    bool is_real = name.rfind("real_", 0) == 0;
    if (is_real == real) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ember::test
