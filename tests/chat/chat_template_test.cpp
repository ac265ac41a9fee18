// Unit tests of the chat template interpreter: errors that name the construct and line,
// raise_exception, limits against hostile templates, and API behaviour. Rendering
// parity with jinja2 is covered by chat_fixture_test.cpp.
#include <gtest/gtest.h>

#include "chat/chat_template.h"

namespace {

using Json = nlohmann::ordered_json;
using ember::chat::ChatTemplate;
using ember::chat::ChatTemplateOptions;

Json user_messages() { return Json::parse(R"([{"role": "user", "content": "hi"}])"); }

ember::Result<std::string> render(const std::string& src, const Json& messages = user_messages(),
                                  ChatTemplateOptions options = {}) {
  auto t = ChatTemplate::parse(src);
  if (!t.is_ok()) return t.status();
  return t->render(messages, options);
}

void expect_error_contains(const ember::Result<std::string>& r, const std::string& needle) {
  ASSERT_FALSE(r.is_ok()) << "rendered: " << r.value();
  EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
}

TEST(ChatTemplate, RendersBasicTemplate) {
  auto r = render("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), "<user>hi");
}

TEST(ChatTemplate, UnsupportedTagNamesTagAndLine) {
  auto r = ChatTemplate::parse("line one\n{% include 'other.jinja' %}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("line 2"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("'include'"), std::string::npos) << r.message();
}

TEST(ChatTemplate, UnknownTagAndFilterAreParseErrors) {
  expect_error_contains(render("{% frobnicate %}"), "unknown tag 'frobnicate'");
  expect_error_contains(render("\n\n{{ x | nosuchfilter }}"), "line 3: no filter named 'nosuchfilter'");
  expect_error_contains(render("{{ x is nosuchtest }}"), "no test named 'nosuchtest'");
  expect_error_contains(render("{% if x %}unterminated"), "expected 'elif', 'else' or 'endif'");
}

TEST(ChatTemplate, FilterJinjaHasButEmberLacksFailsWhenReached) {
  // Parses (jinja2 knows the filter); only an evaluation that reaches it fails.
  EXPECT_TRUE(render("{% if false %}{{ x | urlize }}{% endif %}ok").is_ok());
  expect_error_contains(render("{{ 'x' | urlize }}"), "unsupported filter 'urlize'");
}

TEST(ChatTemplate, UnsupportedPythonMethodFailsByName) {
  expect_error_contains(render("{{ 'a\tb'.expandtabs() }}"), "str.expandtabs()");
}

TEST(ChatTemplate, RaiseExceptionGivesTheMessageVerbatim) {
  auto r = render("{{ raise_exception('Roles must alternate') }}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.message(), "Roles must alternate");
}

TEST(ChatTemplate, RuntimeErrorsNameTheLine) {
  expect_error_contains(render("a\nb\n{{ 1 + 'x' }}"), "line 3: TypeError");
  expect_error_contains(render("{{ nothing.attr }}"), "'nothing' is undefined");
}

TEST(ChatTemplate, GeneratorsAreNotPrintedAsText) {
  // jinja2 prints "<generator object ...>"; ember refuses instead of guessing.
  expect_error_contains(render("{{ messages | map(attribute='role') }}"), "generator");
  auto r = render("{{ messages | map(attribute='role') | list }}");
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), "['user']");
}

TEST(ChatTemplate, LimitsStopHostileTemplates) {
  ChatTemplateOptions small;
  small.limits.max_steps = 100000;
  small.limits.max_output_bytes = 1 << 16;
  expect_error_contains(render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                               user_messages(), small),
                        "evaluation budget");
  expect_error_contains(render("{{ 'x' * 1000000 }}", user_messages(), small), "over the limit");
  expect_error_contains(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "calls deep");
  expect_error_contains(render("{{ range(200000) | length }}"), "MAX_RANGE");
  expect_error_contains(render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
                        "nested too deeply");
  std::string nested_ifs;
  for (int i = 0; i < 1000; ++i) nested_ifs += "{% if true %}";
  expect_error_contains(render(nested_ifs), "nested too deeply");
}

TEST(ChatTemplate, DeeplyNestedValuesAreRefused) {
  expect_error_contains(render("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}"
                               "{% endfor %}{{ ns.x | length }}"),
                        "nested deeper");
  Json deep = "leaf";
  for (int i = 0; i < 2000; ++i) deep = Json::array({deep});
  Json messages = Json::array({Json{{"role", "user"}, {"content", deep}}});
  expect_error_contains(render("{{ messages | length }}", messages), "nested deeper");
  // Nesting within the limit still renders.
  auto r = render("{% set ns = namespace(x=[]) %}{% for i in range(100) %}{% set ns.x = [ns.x] %}{% endfor %}ok");
  ASSERT_TRUE(r.is_ok()) << r.message();
}

TEST(ChatTemplate, ReferenceCyclesDoNotBreakRendering) {
  auto r = render("{% set ns = namespace() %}{% set ns.me = ns %}{% macro m() %}{{ m is defined }}{% endmacro %}"
                  "{% set ns.m = m %}{{ ns.m() }}");
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), "True");
}

TEST(ChatTemplate, MessagesAreNormalizedLikeTransformers) {
  Json messages = Json::parse(R"([{"role": "assistant", "content": null, "reasoning": "why"}])");
  auto r = render("{{ messages[0] | tojson }}", messages);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), R"({"thinking": "why", "role": "assistant", "reasoning": "why", "reasoning_content": "why"})");
}

TEST(ChatTemplate, KeyOrderOfInputIsKept) {
  Json messages = Json::parse(R"([{"role": "user", "content": "x", "zeta": 1, "alpha": 2}])");
  auto r = render("{{ messages[0].keys() | list }}", messages);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), "['role', 'content', 'zeta', 'alpha']");
}

TEST(ChatTemplate, ContextVariables) {
  ChatTemplateOptions o;
  o.bos_token = "<s>";
  o.add_generation_prompt = false;
  o.extra_context = Json::parse(R"({"enable_thinking": false})");
  auto r = render("{{ bos_token }}|{{ eos_token is defined }}|{{ tools is none }}|{{ add_generation_prompt }}|"
                  "{{ enable_thinking is false }}",
                  user_messages(), o);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), "<s>|False|True|False|True");
}

TEST(ChatTemplate, StrftimeNowUsesTheGivenClock) {
  ChatTemplateOptions o;
  o.now = 1735732800;  // 2025-01-01 12:00 UTC: the same date in nearly every zone
  auto r = render("{{ strftime_now('%d %b %Y') }}", user_messages(), o);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), "01 Jan 2025");
}

TEST(ChatTemplate, InvalidInputs) {
  expect_error_contains(render("x", Json::parse(R"({"role": "user"})")), "messages must be a list");
  expect_error_contains(render("x", Json::parse(R"(["text"])")), "should be objects");
  EXPECT_FALSE(ChatTemplate::parse(std::string("\xff\xfe")).is_ok());
}

TEST(ChatTemplate, ParsedTemplateIsReusable) {
  auto t = ChatTemplate::parse("{{ messages | length }}");
  ASSERT_TRUE(t.is_ok());
  ChatTemplate copy = t.value();
  EXPECT_EQ(copy.render(user_messages(), {}).value(), "1");
  EXPECT_EQ(t->render(Json::array(), {}).value(), "0");
}

}  // namespace
