// Hugging Face directories that are incomplete or inconsistent: each must be an error that
// names the file and the problem.
#include "loader/weight_source.h"
#include "test_util.h"

#include <gtest/gtest.h>

namespace ember::loader::test {
namespace {

namespace fs = std::filesystem;

// A copy of a fixture directory in a temp dir, to break.
void copy_fixture_dir(const std::string& name, const fs::path& to) {
  fs::copy(fixture(name), to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

void expect_error(const fs::path& dir, const std::string& substring) {
  auto src = WeightSource::open(dir.string());
  ASSERT_FALSE(src.is_ok()) << "accepted " << dir;
  EXPECT_NE(src.message().find(substring), std::string::npos) << src.message();
}

TEST(HfDirectory, MissingConfig) {
  TempDir tmp;
  copy_fixture_dir("hf_single", tmp.path());
  fs::remove(tmp.path() / "config.json");
  expect_error(tmp.path(), "no config.json");
}

TEST(HfDirectory, InvalidConfig) {
  TempDir tmp;
  copy_fixture_dir("hf_single", tmp.path());
  write_file(tmp.path() / "config.json", "{\"hidden_size\": ");
  expect_error(tmp.path(), "config.json: invalid JSON");
  write_file(tmp.path() / "config.json", "[1, 2]");
  expect_error(tmp.path(), "config.json: not a JSON object");
}

TEST(HfDirectory, InvalidTokenizerConfig) {
  TempDir tmp;
  copy_fixture_dir("hf_single", tmp.path());
  write_file(tmp.path() / "tokenizer_config.json", "{,}");
  expect_error(tmp.path(), "tokenizer_config.json: invalid JSON");
}

TEST(HfDirectory, OptionalFilesMayBeAbsent) {
  TempDir tmp;
  copy_fixture_dir("hf_single", tmp.path());
  fs::remove(tmp.path() / "tokenizer_config.json");
  fs::remove(tmp.path() / "generation_config.json");
  auto src = WeightSource::open(tmp.path().string());
  ASSERT_TRUE(src.is_ok()) << src.message();
  EXPECT_FALSE((*src)->metadata().contains("tokenizer_config"));
  EXPECT_EQ((*src)->metadata()["model_type"], "llama");
}

TEST(HfDirectory, NoWeights) {
  TempDir tmp;
  copy_fixture_dir("hf_single", tmp.path());
  fs::remove(tmp.path() / "model.safetensors");
  expect_error(tmp.path(), "no model.safetensors or model.safetensors.index.json");
}

TEST(HfDirectory, CorruptSingleFileNamesIt) {
  TempDir tmp;
  copy_fixture_dir("hf_single", tmp.path());
  fs::resize_file(tmp.path() / "model.safetensors", 100);
  expect_error(tmp.path(), "model.safetensors: ");
}

TEST(HfDirectory, MissingShard) {
  TempDir tmp;
  copy_fixture_dir("hf_sharded", tmp.path());
  fs::remove(tmp.path() / "model-00002-of-00002.safetensors");
  expect_error(tmp.path(), "shard model-00002-of-00002.safetensors (holding '");
}

TEST(HfDirectory, IndexProblems) {
  TempDir tmp;
  copy_fixture_dir("hf_sharded", tmp.path());
  const fs::path index = tmp.path() / "model.safetensors.index.json";
  const auto original = read_file(index.string());
  auto j = nlohmann::json::parse(original.begin(), original.end());

  write_file(index, "{\"weight_map\": 3}");
  expect_error(tmp.path(), "no \"weight_map\" object");
  write_file(index, "{\"weight_map\": {}}");
  expect_error(tmp.path(), "empty weight_map");

  auto escape = j;
  escape["weight_map"]["model.norm.weight"] = "../model.safetensors";
  write_file(index, escape.dump());
  expect_error(tmp.path(), "tensor 'model.norm.weight': bad shard name");

  auto wrong = j;  // name a tensor the shard does not hold
  wrong["weight_map"]["made.up.weight"] = "model-00001-of-00002.safetensors";
  write_file(index, wrong.dump());
  expect_error(tmp.path(), "tensor 'made.up.weight' is not in its shard");

  // The same shard twice under two names: every tensor appears twice.
  write_file(index, j.dump());
  fs::copy_file(tmp.path() / "model-00001-of-00002.safetensors", tmp.path() / "copy.safetensors");
  auto dup = j;
  dup["weight_map"]["model.embed_tokens.weight"] = "copy.safetensors";  // a shard-1 tensor
  write_file(index, dup.dump());
  expect_error(tmp.path(), "also appears in");
}

}  // namespace
}  // namespace ember::loader::test
