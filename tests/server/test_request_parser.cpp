#include "server/request_parser.h"

#include <gtest/gtest.h>

namespace ember::server {
namespace {

ParseLimits limits() {
  ParseLimits l;
  l.vocab_size = 1000;
  return l;
}

Json parse(const std::string& text) {
  auto j = parse_json_body(text);
  EXPECT_TRUE(j.is_ok()) << (j.is_ok() ? "" : j.error().message);
  return j.is_ok() ? *j : Json();
}

ApiError completion_error(const std::string& body) {
  auto r = parse_completion_request(parse(body), limits());
  EXPECT_FALSE(r.is_ok()) << body;
  return r.is_ok() ? ApiError{} : r.error();
}

ApiError chat_error(const std::string& body) {
  auto r = parse_chat_request(parse(body), limits());
  EXPECT_FALSE(r.is_ok()) << body;
  return r.is_ok() ? ApiError{} : r.error();
}

TEST(RequestParser, CompletionDefaultsAndFields) {
  auto r = parse_completion_request(parse(R"({"model": "m", "prompt": "hi", "unknown_field": {"x": 1}})"), limits());
  ASSERT_TRUE(r.is_ok()) << r.error().message;
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(*r->prompts[0].text, "hi");
  EXPECT_EQ(r->gen.params.max_tokens, 16);  // OpenAI's legacy default
  EXPECT_EQ(r->gen.params.temperature, 1.0f);
  EXPECT_FALSE(r->gen.stream);
  EXPECT_FALSE(r->gen.params.logprobs.has_value());

  auto full = parse_completion_request(parse(R"({
      "prompt": [[1, 2, 3], [4]], "max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": 7,
      "min_p": 0.1, "n": 3, "stop": ["a", "bc"], "seed": -1, "presence_penalty": 1.5,
      "frequency_penalty": -2, "repetition_penalty": 1.1, "logit_bias": {"5": -100, "6": 3.5},
      "logprobs": 2, "echo": true, "ignore_eos": true, "user": "u", "stream": true,
      "stream_options": {"include_usage": true}, "min_tokens": 2, "stop_token_ids": [9],
      "best_of": 3, "max_tokens": null})"),
                                         limits());
  ASSERT_FALSE(full.is_ok());  // echo + logprobs is refused
  EXPECT_EQ(full.error().param, "echo");

  auto ok = parse_completion_request(parse(R"({
      "prompt": [[1, 2, 3], [4]], "max_tokens": 5.0, "temperature": 0, "top_p": 0.5, "top_k": 7,
      "min_p": 0.1, "n": 3, "stop": ["a", "bc"], "seed": -1, "presence_penalty": 1.5,
      "frequency_penalty": -2, "repetition_penalty": 1.1, "logit_bias": {"5": -100, "6": 3.5},
      "logprobs": 2, "ignore_eos": true, "user": "u", "stream": true,
      "stream_options": {"include_usage": true}, "min_tokens": 2, "stop_token_ids": [9], "best_of": 3})"),
                                       limits());
  ASSERT_TRUE(ok.is_ok()) << ok.error().message;
  const SamplingParams& p = ok->gen.params;
  ASSERT_EQ(ok->prompts.size(), 2u);
  EXPECT_EQ(ok->prompts[0].token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ok->prompts[1].token_ids, (std::vector<int32_t>{4}));
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_k, 7);
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(ok->gen.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(*p.seed, ~uint64_t{0});
  EXPECT_EQ(p.logit_bias.at(5), -100.0f);
  EXPECT_EQ(p.logit_bias.at(6), 3.5f);
  EXPECT_EQ(*p.logprobs, 2);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{9}));
  EXPECT_TRUE(ok->gen.stream);
  EXPECT_TRUE(ok->gen.include_usage);
  EXPECT_TRUE(p.validate(1000).is_ok());
}

TEST(RequestParser, PromptShapes) {
  auto strings = parse_completion_request(parse(R"({"prompt": ["a", "b"]})"), limits());
  ASSERT_TRUE(strings.is_ok());
  EXPECT_EQ(strings->prompts.size(), 2u);
  auto ids = parse_completion_request(parse(R"({"prompt": [1, 2]})"), limits());
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids->prompts.size(), 1u);
  EXPECT_EQ(completion_error(R"({"prompt": []})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": ["a", 1]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [1, "a"]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [1000]})").param, "prompt");  // outside the vocabulary
  EXPECT_EQ(completion_error(R"({"prompt": [-1]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [1.5]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [[]]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": {"a": 1}})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"max_tokens": 3})").param, "prompt");
}

TEST(RequestParser, WrongTypesAndRangesNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"prompt": "x", "temperature": "0.5"})", "temperature"},
      {R"({"prompt": "x", "temperature": 2.5})", "temperature"},
      {R"({"prompt": "x", "temperature": -0.1})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.01})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "min_p": 2})", "min_p"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 129})", "n"},
      {R"({"prompt": "x", "n": true})", "n"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1e30})", "max_tokens"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "frequency_penalty": -2.5})", "frequency_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 1]})", "stop"},
      {R"({"prompt": "x", "seed": "1"})", "seed"},
      {R"({"prompt": "x", "seed": 1.5})", "seed"},
      {R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": 101}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"99999": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})", "stream_options"},
      {R"({"prompt": "x", "echo": 1})", "echo"},
      {R"({"prompt": "x", "user": 5})", "user"},
      {R"({"prompt": "x", "model": 5})", "model"},
      {R"({"prompt": "x", "best_of": 2})", "best_of"},
      {R"({"prompt": "x", "suffix": "tail"})", "suffix"},
      {R"({"prompt": "x", "min_tokens": 20})", "min_tokens"},
      {R"({"prompt": "x", "stop_token_ids": [5000]})", "stop_token_ids"},
  };
  for (const Case& c : cases) {
    ApiError e = completion_error(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(RequestParser, NullMeansDefault) {
  auto r = parse_completion_request(
      parse(R"({"prompt": "x", "temperature": null, "stop": null, "n": null, "logprobs": null, "seed": null})"),
      limits());
  ASSERT_TRUE(r.is_ok()) << r.error().message;
  EXPECT_EQ(r->gen.params.temperature, 1.0f);
  EXPECT_EQ(r->gen.params.n, 1);
  EXPECT_FALSE(r->gen.params.seed.has_value());
}

TEST(RequestParser, ChatMessages) {
  auto r = parse_chat_request(parse(R"({"messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": "bob"},
      {"role": "assistant", "content": null},
      {"role": "user", "content": "c"}],
      "max_completion_tokens": 7, "logprobs": true, "top_logprobs": 3})"),
                              limits());
  ASSERT_TRUE(r.is_ok()) << r.error().message;
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[1]["content"], "a\nb");
  EXPECT_EQ(r->messages[1]["name"], "bob");
  EXPECT_EQ(r->messages[2]["content"], "");
  EXPECT_EQ(r->gen.params.max_tokens, 7);
  EXPECT_EQ(r->gen.params.logprobs, 3);
  EXPECT_TRUE(r->add_generation_prompt);

  auto no_max = parse_chat_request(parse(R"({"messages": [{"role": "user", "content": "x"}]})"), limits());
  ASSERT_TRUE(no_max.is_ok());
  EXPECT_FALSE(no_max->gen.params.max_tokens.has_value());  // up to the context window
  EXPECT_FALSE(no_max->gen.params.logprobs.has_value());

  EXPECT_EQ(chat_error(R"({"messages": []})").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages": "hi"})").param, "messages");
  EXPECT_EQ(chat_error(R"({})").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "wizard", "content": "x"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages": [{"content": "x"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user"}]})").param, "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": 5}]})").param, "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})").param,
            "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})").param, "top_logprobs");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})").param,
            "tools");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {}}})").param,
            "response_format");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
            "json_schema": {"name": "n", "schema": {"type": "object", "properties": {"a": {"format": "date"}}}}}})").param,
            "response_format");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}})").param,
            "response_format");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "response_format": "json_object"})").param,
            "response_format");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {}})").param,
            "response_format");
  auto text_format = parse_chat_request(
      parse(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "text"}, "tools": []})"),
      limits());
  ASSERT_TRUE(text_format.is_ok());
  EXPECT_FALSE(text_format->gen.params.json_object);
  auto json_format = parse_chat_request(
      parse(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})"), limits());
  ASSERT_TRUE(json_format.is_ok()) << json_format.error().message;
  EXPECT_TRUE(json_format->gen.params.json_object);
  EXPECT_FALSE(json_format->gen.params.json_schema);
  auto schema_format = parse_chat_request(
      parse(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
               "json_schema": {"name": "n", "schema": {"type": "object", "required": ["a"]}}}})"),
      limits());
  ASSERT_TRUE(schema_format.is_ok()) << schema_format.error().message;
  EXPECT_TRUE(schema_format->gen.params.json_object);
  EXPECT_TRUE(schema_format->gen.params.json_schema);
}

TEST(RequestParser, BodyLevelErrors) {
  EXPECT_FALSE(parse_json_body("{").is_ok());
  EXPECT_FALSE(parse_json_body("").is_ok());
  EXPECT_FALSE(parse_json_body("{\"a\": \"\xff\"}").is_ok());  // invalid UTF-8
  EXPECT_FALSE(parse_json_body("{\"temperature\": 1e309}").is_ok());  // beyond double: not a 500
  std::string deep(100, '[');
  deep += std::string(100, ']');
  auto d = parse_json_body(deep);
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.error().message.find("nested"), std::string::npos);
  // Brackets inside strings do not count.
  EXPECT_TRUE(parse_json_body("{\"a\": \"" + std::string(200, '[') + "\"}").is_ok());
  EXPECT_EQ(completion_error("[1, 2]").status, 400);
  EXPECT_EQ(completion_error("\"prompt\"").status, 400);
}

TEST(RequestParser, TokenizeAndDetokenize) {
  auto t = parse_tokenize_request(parse(R"({"prompt": "hi", "add_special_tokens": false})"), limits());
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(*t->prompt, "hi");
  EXPECT_FALSE(t->add_special_tokens);
  auto m = parse_tokenize_request(parse(R"({"messages": [{"role": "user", "content": "x"}]})"), limits());
  ASSERT_TRUE(m.is_ok());
  EXPECT_FALSE(m->add_special_tokens);
  EXPECT_FALSE(parse_tokenize_request(parse(R"({})"), limits()).is_ok());
  EXPECT_FALSE(parse_tokenize_request(parse(R"({"prompt": "a", "messages": []})"), limits()).is_ok());
  auto d = parse_detokenize_request(parse(R"({"tokens": [1, 2, 999]})"), limits());
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{1, 2, 999}));
  EXPECT_FALSE(parse_detokenize_request(parse(R"({"tokens": [1000]})"), limits()).is_ok());
  EXPECT_FALSE(parse_detokenize_request(parse(R"({"tokens": "1"})"), limits()).is_ok());
  EXPECT_FALSE(parse_detokenize_request(parse(R"({})"), limits()).is_ok());
}

}  // namespace
}  // namespace ember::server
