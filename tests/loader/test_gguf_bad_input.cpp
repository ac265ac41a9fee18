// Hostile and broken GGUF input: every truncation of a real file, and hand-made files with
// one header field broken at a time. Each must be an error that names the problem (and the
// tensor or key), never a crash; the ASan/UBSan build checks "no out-of-bounds read".
#include "loader/gguf_parser.h"
#include "loader/weight_source.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <functional>

namespace ember::loader::test {
namespace {

// A small valid GGUF with the offsets of the fields the tests break.
struct SmallGguf {
  Bytes b;
  size_t version, n_tensors, n_kv, key0_len, str_len, align_type, align_val, arr_type,
      arr_count, t0_name_len, t0_ndims, t0_dim0, t0_dim1, t0_type, t0_offset, t1_name, t1_dim0,
      t1_type, t1_offset;
};

SmallGguf make_small_gguf() {
  SmallGguf g;
  Bytes& b = g.b;
  b.buf = {'G', 'G', 'U', 'F'};
  g.version = b.put<uint32_t>(3);
  g.n_tensors = b.put<uint64_t>(2);
  g.n_kv = b.put<uint64_t>(3);
  g.key0_len = b.put_str("general.architecture");
  b.put<uint32_t>(8);
  g.str_len = b.put_str("llama");
  b.put_str("general.alignment");
  g.align_type = b.put<uint32_t>(4);
  g.align_val = b.put<uint32_t>(32);
  b.put_str("tokenizer.ggml.tokens");
  b.put<uint32_t>(9);
  g.arr_type = b.put<uint32_t>(8);
  g.arr_count = b.put<uint64_t>(2);
  b.put_str("a");
  b.put_str("bc");
  g.t0_name_len = b.put_str("w");  // F32 [3, 4]: ne = {4, 3}
  g.t0_ndims = b.put<uint32_t>(2);
  g.t0_dim0 = b.put<uint64_t>(4);
  g.t0_dim1 = b.put<uint64_t>(3);
  g.t0_type = b.put<uint32_t>(0);
  g.t0_offset = b.put<uint64_t>(0);
  g.t1_name = b.put_str("q");  // Q8_0 [32]
  b.put<uint32_t>(1);
  g.t1_dim0 = b.put<uint64_t>(32);
  g.t1_type = b.put<uint32_t>(8);
  g.t1_offset = b.put<uint64_t>(64);
  b.pad_to(32);
  for (int i = 0; i < 64 + 34; ++i) b.buf.push_back(static_cast<uint8_t>(i));
  b.pad_to(32);
  return g;
}

TEST(GgufBadInput, SmallFileIsValid) {
  auto g = make_small_gguf();
  auto f = parse_gguf(g.b.buf.data(), g.b.buf.size(), "small.gguf");
  ASSERT_TRUE(f.is_ok()) << f.message();
  ASSERT_EQ(f->tensors.size(), 2u);
  EXPECT_EQ(f->tensors[1].nbytes, 34u);
  EXPECT_EQ(f->metadata["tokenizer.ggml.tokens"], nlohmann::json({"a", "bc"}));
}

struct Case {
  const char* what;
  std::function<void(SmallGguf&)> mutate;
  const char* message;  // a substring the error must contain
};

TEST(GgufBadInput, BrokenFieldsAreNamedErrors) {
  constexpr uint64_t kHuge = 0xffffffffffffffffull;
  const std::vector<Case> cases = {
      {"bad magic", [](SmallGguf& g) { g.b.buf[0] = 'X'; }, "bad magic"},
      {"version 1", [](SmallGguf& g) { g.b.set<uint32_t>(g.version, 1); }, "version 1"},
      {"version 9", [](SmallGguf& g) { g.b.set<uint32_t>(g.version, 9); }, "version 9"},
      {"big endian", [](SmallGguf& g) { g.b.set<uint32_t>(g.version, 0x03000000); }, "big-endian"},
      {"huge tensor count", [](SmallGguf& g) { g.b.set<uint64_t>(g.n_tensors, kHuge); },
       "tensor count"},
      {"more tensors than present", [](SmallGguf& g) { g.b.set<uint64_t>(g.n_tensors, 9); },
       "tensor"},
      {"huge kv count", [](SmallGguf& g) { g.b.set<uint64_t>(g.n_kv, 1ull << 40); },
       "metadata count"},
      {"huge key length", [](SmallGguf& g) { g.b.set<uint64_t>(g.key0_len, kHuge); },
       "exceeds file size"},
      {"string past EOF", [](SmallGguf& g) { g.b.set<uint64_t>(g.str_len, 1u << 20); },
       "key 'general.architecture'"},
      {"unknown value type", [](SmallGguf& g) { g.b.set<uint32_t>(g.align_type, 13); },
       "key 'general.alignment': unknown value type 13"},
      {"alignment not integer", [](SmallGguf& g) { g.b.set<uint32_t>(g.align_type, 6); },
       "general.alignment"},
      {"alignment 0", [](SmallGguf& g) { g.b.set<uint32_t>(g.align_val, 0); },
       "general.alignment 0"},
      {"alignment 24", [](SmallGguf& g) { g.b.set<uint32_t>(g.align_val, 24); },
       "general.alignment 24"},
      {"bad array type", [](SmallGguf& g) { g.b.set<uint32_t>(g.arr_type, 77); },
       "unknown array element type 77"},
      {"huge array", [](SmallGguf& g) { g.b.set<uint64_t>(g.arr_count, 1ull << 62); },
       "key 'tokenizer.ggml.tokens': array of"},
      {"array of bools with bad byte",
       [](SmallGguf& g) {
         // Reads the strings' bytes as bools: 01 00 00 00 00 00 00 00 'a'.
         g.b.set<uint32_t>(g.arr_type, 7);
         g.b.set<uint64_t>(g.arr_count, 9);
       },
       "invalid bool byte 97"},
      {"tensor name length huge", [](SmallGguf& g) { g.b.set<uint64_t>(g.t0_name_len, kHuge); },
       "tensor name"},
      {"n_dims 0", [](SmallGguf& g) { g.b.set<uint32_t>(g.t0_ndims, 0); },
       "tensor 'w': n_dims 0"},
      {"n_dims 5", [](SmallGguf& g) { g.b.set<uint32_t>(g.t0_ndims, 5); },
       "tensor 'w': n_dims 5"},
      {"dim 0", [](SmallGguf& g) { g.b.set<uint64_t>(g.t0_dim1, 0); },
       "tensor 'w': dimension 1 is 0"},
      {"negative dim", [](SmallGguf& g) { g.b.set<uint64_t>(g.t0_dim0, kHuge); },
       "tensor 'w': dimension 0"},
      {"dims overflow",
       [](SmallGguf& g) {
         g.b.set<uint64_t>(g.t0_dim0, 1ull << 40);
         g.b.set<uint64_t>(g.t0_dim1, 1ull << 40);
       },
       "tensor 'w': element count overflows"},
      {"bytes overflow", [](SmallGguf& g) { g.b.set<uint64_t>(g.t0_dim0, 1ull << 61); },
       "tensor 'w': byte size overflows"},
      {"huge dims", [](SmallGguf& g) { g.b.set<uint64_t>(g.t0_dim0, 1ull << 40); },
       "tensor 'w': data"},
      {"unknown tensor type", [](SmallGguf& g) { g.b.set<uint32_t>(g.t0_type, 99); },
       "tensor 'w': unsupported tensor type id 99"},
      {"ember-only type id", [](SmallGguf& g) { g.b.set<uint32_t>(g.t0_type, 1000); },
       "unsupported tensor type id 1000"},
      {"type id -1", [](SmallGguf& g) { g.b.set<uint32_t>(g.t0_type, 0xffffffffu); },
       "unsupported tensor type id"},
      {"row not whole blocks", [](SmallGguf& g) { g.b.set<uint64_t>(g.t1_dim0, 33); },
       "tensor 'q': row of 33 elements is not a multiple of q8_0's block size 32"},
      {"offset past EOF", [](SmallGguf& g) { g.b.set<uint64_t>(g.t1_offset, 4096); },
       "tensor 'q': data ["},
      {"offset overflow", [](SmallGguf& g) { g.b.set<uint64_t>(g.t1_offset, kHuge - 31); },
       "tensor 'q': data offset"},
      {"misaligned offset", [](SmallGguf& g) { g.b.set<uint64_t>(g.t1_offset, 48); },
       "tensor 'q': offset 48 is not a multiple of the alignment 32"},
      {"duplicate tensor", [](SmallGguf& g) { g.b.buf[g.t1_name + 8] = 'w'; },
       "duplicate tensor 'w'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto g = make_small_gguf();
    c.mutate(g);
    auto f = parse_gguf(g.b.buf.data(), g.b.buf.size(), "small.gguf");
    ASSERT_FALSE(f.is_ok()) << c.what << " was accepted";
    EXPECT_NE(f.message().find("small.gguf: "), std::string::npos) << f.message();
    EXPECT_NE(f.message().find(c.message), std::string::npos) << f.message();
  }
}

TEST(GgufBadInput, DuplicateKeyIsAnError) {
  Bytes b;
  b.buf = {'G', 'G', 'U', 'F'};
  b.put<uint32_t>(3);
  b.put<uint64_t>(0);
  b.put<uint64_t>(2);
  for (int i = 0; i < 2; ++i) {
    b.put_str("k");
    b.put<uint32_t>(4);
    b.put<uint32_t>(1);
  }
  auto f = parse_gguf(b.buf.data(), b.buf.size(), "dup.gguf");
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.message().find("duplicate metadata key 'k'"), std::string::npos) << f.message();
}

TEST(GgufBadInput, DeeplyNestedArraysAreRejected) {
  Bytes b;
  b.buf = {'G', 'G', 'U', 'F'};
  b.put<uint32_t>(3);
  b.put<uint64_t>(0);
  b.put<uint64_t>(1);
  b.put_str("deep");
  b.put<uint32_t>(9);
  for (int i = 0; i < 100; ++i) {
    b.put<uint32_t>(9);
    b.put<uint64_t>(1);
  }
  b.put<uint32_t>(4);
  b.put<uint64_t>(1);
  b.put<uint32_t>(7);
  auto f = parse_gguf(b.buf.data(), b.buf.size(), "deep.gguf");
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.message().find("nested deeper"), std::string::npos) << f.message();
}

TEST(GgufBadInput, EveryTruncationOfARealFileFails) {
  for (const char* name : {"all_types.gguf", "aligned64.gguf"}) {
    const auto bytes = read_file(fixture(name));
    auto full = parse_gguf(bytes.data(), bytes.size(), name);
    ASSERT_TRUE(full.is_ok()) << full.message();
    size_t data_end = 0;  // bytes past the last tensor are padding, which may go
    for (const auto& t : full->tensors) data_end = std::max(data_end, t.file_offset + t.nbytes);
    for (size_t len = 0; len < bytes.size(); ++len) {
      // A copy of exactly `len` bytes, so ASan sees any read past the end.
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(len));
      auto f = parse_gguf(cut.data(), cut.size(), name);
      if (len < data_end) {
        ASSERT_FALSE(f.is_ok()) << name << " truncated to " << len << " bytes was accepted";
        ASSERT_NE(f.message().find(name), std::string::npos);
      } else {
        ASSERT_TRUE(f.is_ok()) << len << ": " << f.message();
      }
    }
  }
}

TEST(GgufBadInput, EverySingleByteCorruptionIsSafe) {
  // Not every flip is detectable (a flipped data byte is still a valid file); each must
  // simply parse or fail cleanly. Run under ASan/UBSan this checks memory safety.
  const auto bytes = read_file(fixture("all_types.gguf"));
  size_t n_errors = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x80}}) {
      auto copy = bytes;
      copy[i] = v;
      auto f = parse_gguf(copy.data(), copy.size(), "x.gguf");
      n_errors += f.is_ok() ? 0 : 1;
    }
  }
  EXPECT_GT(n_errors, 100u);
}

TEST(WeightSourceOpen, PathErrors) {
  auto missing = WeightSource::open("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("/nonexistent/model.gguf"), std::string::npos);

  auto bare = WeightSource::open(fixture("hf_single/model.safetensors"));
  ASSERT_FALSE(bare.is_ok());
  EXPECT_NE(bare.message().find("directory"), std::string::npos) << bare.message();

  auto not_gguf = WeightSource::open(fixture("hf_single/config.json"));
  ASSERT_FALSE(not_gguf.is_ok());
  EXPECT_NE(not_gguf.message().find("not a GGUF file"), std::string::npos) << not_gguf.message();

  TempDir tmp;
  write_file(tmp.path() / "empty.gguf", "");
  auto empty = WeightSource::open((tmp.path() / "empty.gguf").string());
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.message().find("truncated"), std::string::npos) << empty.message();
}

}  // namespace
}  // namespace ember::loader::test
