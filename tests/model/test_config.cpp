// ModelConfig parsing: both transformers generations, unknown architectures, bad values.
#include "model/config.h"

#include <gtest/gtest.h>

namespace ember {
namespace {

using nlohmann::json;

json llama_base() {
  return json{{"model_type", "llama"}, {"vocab_size", 100}, {"hidden_size", 64},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
              {"intermediate_size", 128}, {"rms_norm_eps", 1e-5}};
}

TEST(ModelConfig, UnknownArchitectureIsNamedWithTheSupportedList) {
  json j = llama_base();
  j["model_type"] = "falcon";
  auto r = config_from_hf(j);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("falcon"), std::string::npos);
  EXPECT_NE(r.message().find("qwen3"), std::string::npos);
  auto g = config_from_gguf(json{{"general.architecture", "mamba"}});
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.message().find("mamba"), std::string::npos);
}

TEST(ModelConfig, Transformers4And5RopeFormatsAgree) {
  json t4 = llama_base();
  t4["rope_theta"] = 500000.0;
  t4["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  json t5 = llama_base();
  t5["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                           {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 8192}};
  json t4_old_key = t4;
  t4_old_key["rope_scaling"].erase("rope_type");
  t4_old_key["rope_scaling"]["type"] = "llama3";
  for (const json& j : {t4, t5, t4_old_key}) {
    auto r = config_from_hf(j);
    ASSERT_TRUE(r.is_ok()) << r.message();
    EXPECT_FLOAT_EQ(r->rope.theta, 500000.0f);
    EXPECT_EQ(r->rope.scaling.type, RopeScaling::Type::Llama3);
    EXPECT_FLOAT_EQ(r->rope.scaling.factor, 8.0f);
  }
}

TEST(ModelConfig, RejectsBadShapes) {
  json j = llama_base();
  j["num_key_value_heads"] = 3;
  EXPECT_FALSE(config_from_hf(j).is_ok());
  j = llama_base();
  j["hidden_size"] = "big";
  EXPECT_FALSE(config_from_hf(j).is_ok());
  j = llama_base();
  j["rope_scaling"] = {{"rope_type", "yarn-ish"}, {"factor", 2.0}};
  auto r = config_from_hf(j);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("yarn-ish"), std::string::npos);
}

TEST(ModelConfig, Gemma3LayerPatternFromLayerTypesOrDefault) {
  json j = llama_base();
  j["model_type"] = "gemma3_text";
  j["num_hidden_layers"] = 12;
  auto r = config_from_hf(j);
  ASSERT_TRUE(r.is_ok()) << r.message();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(r->layer_sliding[i], (i + 1) % 6 != 0) << i;
  j["num_hidden_layers"] = 2;
  j["layer_types"] = {"full_attention", "sliding_attention"};
  r = config_from_hf(j);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_FALSE(r->layer_sliding[0]);
  EXPECT_TRUE(r->layer_sliding[1]);
}

}  // namespace
}  // namespace ember
