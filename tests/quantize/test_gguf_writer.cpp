// GgufWriter: every value type (nested arrays included) read back by ember's parser with the
// same values and stored types; tensor data aligned; errors as Status, no PATH.tmp left.
#include "loader/gguf_writer.h"
#include "quantize_test_util.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ember::loader {
namespace {

using T = GgufType;

TEST(GgufWriter, EveryValueTypeRoundTrips) {
  const std::string path = test::temp_dir("writer") + "/w.gguf";
  GgufWriter w(path, 64);
  struct Kv { std::string key; nlohmann::json v; GgufValueType t; };
  GgufValueType nested = gguf_type(T::ARRAY, T::ARRAY);
  nested.items = {gguf_type(T::ARRAY, T::INT16), gguf_type(T::ARRAY, T::STRING)};
  std::vector<Kv> kvs = {
      {"u8", 255, gguf_type(T::UINT8)},          {"i8", -128, gguf_type(T::INT8)},
      {"u16", 65535, gguf_type(T::UINT16)},      {"i16", -32768, gguf_type(T::INT16)},
      {"u32", 4294967295u, gguf_type(T::UINT32)}, {"i32", -5, gguf_type(T::INT32)},
      {"u64", 18446744073709551615ull, gguf_type(T::UINT64)},
      {"i64", -9223372036854775807ll, gguf_type(T::INT64)},
      {"f32", 0.5, gguf_type(T::FLOAT32)},       {"f64", 0.1, gguf_type(T::FLOAT64)},
      {"b", true, gguf_type(T::BOOL)},           {"s", "héllo", gguf_type(T::STRING)},
      {"general.alignment", 64, gguf_type(T::UINT32)},
      {"a_u32", {1, 2, 3}, gguf_type(T::ARRAY, T::UINT32)},
      {"a_str", {"a", "", "c"}, gguf_type(T::ARRAY, T::STRING)},
      {"a_empty", nlohmann::json::array(), gguf_type(T::ARRAY, T::FLOAT32)},
      {"nested", {{1, -2}, {"x"}}, nested},
  };
  for (const auto& kv : kvs) ASSERT_TRUE(w.set(kv.key, kv.v, kv.t).is_ok()) << kv.key;
  ASSERT_TRUE(w.set("u8", 7, gguf_type(T::UINT8)).is_ok());  // replaces, keeps the position
  kvs[0].v = 7;
  const float a[3] = {1, 2, 3};
  const uint16_t h[32] = {};
  ASSERT_TRUE(w.add_tensor({"a", DType::F32, 1, {3, 1, 1, 1}}).is_ok());
  ASSERT_TRUE(w.add_tensor({"h", DType::F16, 2, {16, 2, 1, 1}}).is_ok());
  ASSERT_TRUE(w.begin().is_ok());
  ASSERT_TRUE(w.write_tensor_data(a, sizeof(a)).is_ok());
  ASSERT_TRUE(w.write_tensor_data(h, sizeof(h)).is_ok());
  ASSERT_TRUE(w.finish().is_ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  auto g = test::read_gguf(path);
  ASSERT_TRUE(g.is_ok()) << g.message();
  ASSERT_EQ(g->gguf.metadata_keys.size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    const auto& kv = kvs[i];
    EXPECT_EQ(g->gguf.metadata_keys[i], kv.key);
    if (kv.t.type == T::FLOAT32) {
      EXPECT_EQ(g->gguf.metadata[kv.key].get<float>(), kv.v.get<float>());
    } else {
      EXPECT_EQ(g->gguf.metadata[kv.key], kv.v) << kv.key;
    }
    const auto& t = g->gguf.metadata_types.at(kv.key);
    EXPECT_EQ(t.type, kv.t.type) << kv.key;
    if (kv.t.type == T::ARRAY) {
      EXPECT_EQ(t.elem, kv.t.elem) << kv.key;
    }
  }
  const auto& nt = g->gguf.metadata_types.at("nested");
  ASSERT_EQ(nt.items.size(), 2u);
  EXPECT_EQ(nt.items[0].elem, T::INT16);
  EXPECT_EQ(nt.items[1].elem, T::STRING);
  EXPECT_EQ(g->gguf.alignment, 64u);
  ASSERT_EQ(g->gguf.tensors.size(), 2u);
  EXPECT_EQ(g->gguf.tensors[1].file_offset % 64, 0u);
  EXPECT_EQ(std::memcmp(g->data(g->gguf.tensors[0]), a, sizeof(a)), 0);
}

TEST(GgufWriter, ValuesThatDoNotFitTheirType) {
  GgufWriter w(test::temp_dir("writer-bad") + "/w.gguf");
  EXPECT_FALSE(w.set("k", -1, gguf_type(T::UINT32)).is_ok());
  EXPECT_FALSE(w.set("k", 70000, gguf_type(T::UINT16)).is_ok());
  EXPECT_FALSE(w.set("k", 1.5, gguf_type(T::INT32)).is_ok());
  EXPECT_FALSE(w.set("k", "1", gguf_type(T::INT32)).is_ok());
  EXPECT_FALSE(w.set("k", 1, gguf_type(T::STRING)).is_ok());
  EXPECT_FALSE(w.set("k", {1, 2}, gguf_type(T::ARRAY, T::ARRAY)).is_ok());  // no item types
  auto st = w.set("my.key", {1, "x"}, gguf_type(T::ARRAY, T::INT32));
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("w.gguf: metadata key 'my.key'"), std::string::npos) << st.message();
}

TEST(GgufWriter, MisuseIsAnErrorAndLeavesNoFiles) {
  const std::string path = test::temp_dir("writer-misuse") + "/w.gguf";
  {
    GgufWriter w(path);
    EXPECT_FALSE(w.add_tensor({"q", DType::Q4_0, 1, {20, 1, 1, 1}}).is_ok());  // not 32-aligned
    ASSERT_TRUE(w.add_tensor({"a", DType::F32, 1, {4, 1, 1, 1}}).is_ok());
    EXPECT_FALSE(w.add_tensor({"a", DType::F32, 1, {4, 1, 1, 1}}).is_ok());  // duplicate
    EXPECT_FALSE(w.finish().is_ok());                                          // before begin
    ASSERT_TRUE(w.begin().is_ok());
    EXPECT_TRUE(std::filesystem::exists(path + ".tmp"));
    const float x[3] = {};
    EXPECT_FALSE(w.write_tensor_data(x, sizeof(x)).is_ok());  // 12 bytes for a 16-byte tensor
  }  // abandoned: the destructor removes PATH.tmp
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(path));
  GgufWriter w2(path);
  ASSERT_TRUE(w2.add_tensor({"a", DType::F32, 1, {4, 1, 1, 1}}).is_ok());
  ASSERT_TRUE(w2.begin().is_ok());
  auto st = w2.finish();  // no data written
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("0 of 1 tensors written"), std::string::npos) << st.message();
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace ember::loader
