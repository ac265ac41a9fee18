// A real model against llama.cpp's llama-quantize: Gemma 3 270M Q8_0 requantized to Q4_0 by
// both tools, same threads; the files must be identical byte for byte (metadata, tensor order,
// types incl. the Q8_0 fallback of token_embd, data). Skipped when the model
// (scripts/get-models.sh) or llama-quantize (bench/peer/build-llamacpp.sh) is missing.
#include "quantize_test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace ember {
namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

TEST(QuantizeReal, Gemma3Q8ToQ4_0IdenticalToLlamaQuantize) {
  const char* home = std::getenv("HOME");
  const std::string lq = std::string(home ? home : "/root") +
                         "/.cache/ember/llama.cpp-0.3.36/build/bin/llama-quantize";
  if (!std::filesystem::exists(lq)) GTEST_SKIP() << "no " << lq;
  auto m = test::run_cmd(EMBER_SOURCE_DIR "/scripts/get-models.sh --only gemma3-270m-q8_0 2>/dev/null");
  const std::string line = first_line(m.output);
  const auto tab = line.find('\t');
  if (m.rc != 0 || tab == std::string::npos) GTEST_SKIP() << "no gemma3-270m-q8_0: " << m.output;
  const std::string model = line.substr(tab + 1);
  const std::string dir = test::temp_dir("real");
  auto e = test::run_cmd(test::ember_quantize("-m " + model + " -o " + dir + "/ember.gguf --type q4_0 --allow-requantize --threads 2"));
  ASSERT_EQ(e.rc, 0) << e.output;
  auto l = test::run_cmd(lq + " --allow-requantize " + model + " " + dir + "/llama.gguf Q4_0 2");
  ASSERT_EQ(l.rc, 0) << l.output;
  auto c = test::run_cmd("cmp " + dir + "/ember.gguf " + dir + "/llama.gguf");
  EXPECT_EQ(c.rc, 0) << c.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ember
