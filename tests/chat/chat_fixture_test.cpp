// Renders every case of tests/fixtures/chat/expected.json (written by
// tools/make_chat_fixtures.py from jinja2 as transformers configures it) with ember and
// compares the text exactly; a template's raise_exception must give the same message.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"

namespace {

using Json = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Json& fixture_cases() {
  static const Json cases = [] {
    Json doc = Json::parse(read_file(std::string(EMBER_CHAT_FIXTURES) + "/expected.json"), nullptr, false);
    return doc.is_discarded() ? Json::array() : doc["cases"];
  }();
  return cases;
}

std::vector<size_t> case_indices() {
  std::vector<size_t> out;
  for (size_t i = 0; i < fixture_cases().size(); ++i) out.push_back(i);
  return out;
}

class ChatFixture : public testing::TestWithParam<size_t> {};

TEST(ChatFixtureFile, HasCases) { EXPECT_GT(fixture_cases().size(), 100u); }

TEST_P(ChatFixture, MatchesJinja2) {
  const Json& c = fixture_cases()[GetParam()];
  const std::string source = read_file(std::string(EMBER_CHAT_FIXTURES) + "/templates/" + c["template"].get<std::string>());
  ASSERT_FALSE(source.empty()) << c["template"];
  auto tmpl = ember::chat::ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.message();

  ember::chat::ChatTemplateOptions options;
  options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  options.bos_token = c.value("bos_token", std::string());
  options.eos_token = c.value("eos_token", std::string());
  options.extra_context = c["extra_context"];
  options.now = static_cast<std::time_t>(c["now"].get<int64_t>());
  auto text = tmpl->render(c["messages"], options);

  const Json& expected = c["expected"];
  if (expected["ok"].get<bool>()) {
    ASSERT_TRUE(text.is_ok()) << text.message();
    EXPECT_EQ(text.value(), expected["text"].get<std::string>());
  } else if (expected.contains("raised")) {
    ASSERT_FALSE(text.is_ok()) << "expected raise_exception, got text:\n" << text.value();
    EXPECT_EQ(text.message(), expected["raised"].get<std::string>());
  } else {
    EXPECT_FALSE(text.is_ok()) << "jinja2 failed (" << expected["error"].get<std::string>()
                               << ") but ember rendered:\n" << text.value();
  }
}

INSTANTIATE_TEST_SUITE_P(Jinja2, ChatFixture, testing::ValuesIn(case_indices()),
                         [](const testing::TestParamInfo<size_t>& param) {
                           return fixture_cases()[param.param]["name"].get<std::string>();
                         });

}  // namespace
