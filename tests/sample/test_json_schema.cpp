#include "sample/json_schema.h"

#include "sample/json_constraint.h"
#include "sample/sampler.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <set>
#include <string>

namespace ember {
namespace {

using Json = nlohmann::json;

std::shared_ptr<const JsonSchema> compiled(const char* text) {
  auto s = JsonSchema::compile(Json::parse(text));
  EXPECT_TRUE(s.is_ok()) << s.message();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

std::string compile_error(const char* text) {
  auto s = JsonSchema::compile(Json::parse(text));
  return s.is_ok() ? std::string("(compiled)") : s.message();
}

bool matches(const JsonSchema& schema, std::string_view text) {
  JsonMatcher m(&schema);
  for (char c : text)
    if (!m.feed(std::string_view(&c, 1))) return false;
  return m.complete();
}

TEST(JsonSchema, RefusesWhatItCannotEnforceByName) {
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}})")
                .find("'minimum' at the root.properties.age"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"allOf": [{"type": "object"}]})").find("'allOf'"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}})")
                .find("same character"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"a": {"oneOf": [{"enum": ["x"]}, {"type": "string"}]}}})")
                .find("same character"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "array"})").find("root must allow an object"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"a": {"enum": [[1]]}}})").find("only strings"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref": "#/$defs/missing"})").find("points at nothing"), std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref": "other.json#/x"})").find("not supported"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "objet"})").find("not a JSON type name"), std::string::npos);
  EXPECT_NE(compile_error(R"(false)").find("nothing matches"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"a": {"type": "array", "minItems": 3, "maxItems": 2}}})")
                .find("minItems > maxItems"),
            std::string::npos);
  EXPECT_EQ(compile_error(R"({"title": "t", "description": "d", "type": "object", "$schema": "x"})"), "(compiled)");
  // Request bodies are untrusted: a schema nested 100,000 deep is an error, not a stack overflow.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += R"({"items":)";
  deep += "{}";
  deep += std::string(100000, '}');
  EXPECT_NE(compile_error(("{\"type\": \"object\", \"properties\": {\"a\": " + deep + "}}").c_str()).find("deeper than"),
            std::string::npos);
}

TEST(JsonSchema, AgreesWithPythonJsonschemaOnFixtures) {
  std::ifstream in(std::string(EMBER_JSON_FIXTURES) + "/schema_cases.json");
  ASSERT_TRUE(in) << "tests/fixtures/json/schema_cases.json (tools/make_json_schema_fixtures.py)";
  const Json all = Json::parse(in);
  ASSERT_GE(all.size(), 5u);
  int n_valid = 0, n_invalid = 0;
  for (const Json& group : all) {
    auto schema = JsonSchema::compile(group["schema"]);
    ASSERT_TRUE(schema.is_ok()) << schema.message() << ": " << group["schema"].dump();
    for (const Json& c : group["cases"]) {
      const std::string text = c["text"].get<std::string>();
      const bool valid = c["valid"].get<bool>();
      (valid ? n_valid : n_invalid) += 1;
      EXPECT_EQ(matches(**schema, text), valid)
          << "jsonschema says " << (valid ? "valid" : "invalid") << ": " << text << "\nschema " << group["schema"].dump();
    }
  }
  EXPECT_GT(n_valid, 300);
  EXPECT_GT(n_invalid, 150);
}

TEST(JsonSchema, KeysEnumsAndCounts) {
  auto s = compiled(R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"},
                        "c": {"enum": ["red", 7, null]}, "l": {"type": "array", "items": {"type": "boolean"},
                        "minItems": 1, "maxItems": 2}}, "required": ["name"], "additionalProperties": false})");
  ASSERT_TRUE(s);
  EXPECT_TRUE(matches(*s, R"({"name": "x"})"));
  EXPECT_TRUE(matches(*s, R"({"n": -3, "name": "", "c": 7, "l": [true, false]})"));
  EXPECT_FALSE(matches(*s, R"({})"));                         // name is required
  EXPECT_FALSE(matches(*s, R"({"name": "x", "name": "y"})"));  // twice
  EXPECT_FALSE(matches(*s, R"({"name": "x", "other": 1})"));   // no other key
  EXPECT_FALSE(matches(*s, R"({"name": "x", "n": 1.5})"));
  EXPECT_FALSE(matches(*s, R"({"name": "x", "n": 1e2})"));
  EXPECT_FALSE(matches(*s, R"({"name": "x", "c": "re"})"));
  EXPECT_FALSE(matches(*s, R"({"name": "x", "c": 70})"));
  EXPECT_FALSE(matches(*s, R"({"name": "x", "l": []})"));
  EXPECT_FALSE(matches(*s, R"({"name": "x", "l": [true, true, true]})"));
  EXPECT_FALSE(matches(*s, R"({"name": 1})"));
  // Early: a key that no declared name starts with is out at its first byte.
  JsonMatcher m(s.get());
  ASSERT_TRUE(m.feed("{\"n"));
  EXPECT_FALSE(m.accepts("o"));
  EXPECT_TRUE(m.accepts("ame\""));
  EXPECT_TRUE(m.accepts("\""));
  // After all keys were written, only the close may come.
  JsonMatcher full(s.get());
  ASSERT_TRUE(full.feed(R"({"name": "x", "n": 1, "c": null, "l": [true])"));
  EXPECT_FALSE(full.accepts(","));
  EXPECT_TRUE(full.accepts("}"));
}

TEST(JsonSchema, AlternativesOfDifferentTypes) {
  // pydantic's Optional[int] and Optional[Model]: anyOf [X, null].
  auto s = compiled(R"({"$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
                        "type": "object", "properties": {"n": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null},
                        "p": {"oneOf": [{"$ref": "#/$defs/P"}, {"type": "null"}, {"enum": ["none", "all"]}]}}})");
  ASSERT_TRUE(s);
  EXPECT_TRUE(matches(*s, R"({"n": 3, "p": {"x": 1}})"));
  EXPECT_TRUE(matches(*s, R"({"n": null, "p": null})"));
  EXPECT_TRUE(matches(*s, R"({"p": "all"})"));
  EXPECT_FALSE(matches(*s, R"({"n": 3.5})"));
  EXPECT_FALSE(matches(*s, R"({"n": "3"})"));
  EXPECT_FALSE(matches(*s, R"({"p": {}})"));       // x is required
  EXPECT_FALSE(matches(*s, R"({"p": "some"})"));
  EXPECT_FALSE(matches(*s, R"({"p": [1]})"));
  // Alternatives that lead back to themselves compile (JSON Schema allows them) but match no value.
  auto loop = compiled(R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "type": "object",
                           "properties": {"k": {"$ref": "#/$defs/a"}}})");
  ASSERT_TRUE(loop);
  EXPECT_TRUE(matches(*loop, R"({})"));
  EXPECT_FALSE(matches(*loop, R"({"k": 1})"));
}

TEST(JsonSchema, RecursiveReferences) {
  auto s = compiled(R"({"$defs": {"t": {"type": "object", "properties": {"k": {"type": "array",
                        "items": {"$ref": "#/$defs/t"}}}, "additionalProperties": false}}, "$ref": "#/$defs/t"})");
  ASSERT_TRUE(s);
  EXPECT_TRUE(matches(*s, R"({"k": [{}, {"k": [{"k": []}]}]})"));
  EXPECT_FALSE(matches(*s, R"({"k": [{"j": 1}]})"));
  std::string deep = "{";
  for (int i = 0; i < JsonMatcher::kMaxSchemaDepth; ++i) deep += "\"k\": [{";
  EXPECT_FALSE(matches(*s, deep + "}"));  // deeper than the schema mode's bound
}

// Sampled under a schema from random logits over a small vocabulary (every letter of the names
// on its own, so no prefix is a dead end): every finished output is parsed by nlohmann::json
// and checked against the schema by hand.
TEST(JsonSchema, SampledOutputsMatchTheSchema) {
  auto schema = compiled(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                             "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 2}},
                             "required": ["name", "age"], "additionalProperties": false})");
  ASSERT_TRUE(schema);
  std::vector<std::string> words = {"{", "}", "[", "]", "\"", ":", ",", " ", "name", "age", "tags", "\"name\"", "\"age\": ",
                                    "1", "-", "0", "2", ".5", "e", "a", "b", "c", "bc", "\"a\"", "true", "null", "x y",
                                    "\":", "n", "am", "m", "g", "t", "s", "\\n", "\xC3\xA9", ""};
  const int32_t eos = static_cast<int32_t>(words.size()) - 1;
  auto vocab = std::make_shared<const JsonVocab>(words);
  Sampler sampler({eos});
  sampler.set_json_vocab(vocab);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  int ended = 0;
  for (int run = 0; run < 100; ++run) {
    SamplingParams p;
    p.json_object = true;
    p.json_schema = schema;
    p.temperature = run % 2 == 0 ? 0.0f : 1.0f;
    std::vector<int32_t> out;
    std::string text;
    for (int step = 0; step < 300; ++step) {
      std::vector<float> logits(words.size());
      for (float& v : logits) v = normal(rng);
      logits[1] += 1.0f;
      const SamplerRow row{0, &p, {}, out, &rng};
      const int32_t t = sampler.sample_row(logits, row).token_id;
      if (t == eos) {
        ++ended;
        const Json j = Json::parse(text);
        ASSERT_TRUE(j.is_object()) << text;
        std::set<std::string> keys;
        for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
        EXPECT_TRUE(keys.count("name") && keys.count("age")) << text;
        for (const auto& k : keys) EXPECT_TRUE(k == "name" || k == "age" || k == "tags") << text;
        EXPECT_TRUE(j["name"].is_string()) << text;
        EXPECT_TRUE(j["age"].is_number_integer()) << text;
        if (j.contains("tags")) {
          ASSERT_TRUE(j["tags"].is_array()) << text;
          EXPECT_LE(j["tags"].size(), 2u) << text;
          for (const Json& v : j["tags"]) EXPECT_TRUE(v == "a" || v == "bc") << text;
        }
        break;
      }
      out.push_back(t);
      text += words[static_cast<size_t>(t)];
      JsonMatcher m;
      ASSERT_TRUE(json_state_of(*vocab, schema.get(), out, m)) << text;
    }
  }
  EXPECT_GT(ended, 50);
}

}  // namespace
}  // namespace ember
