// Broken safetensors input: bad header lengths, bad JSON, bad entries, bad offsets, and
// every truncation of a real file. Each must be an error naming the problem.
#include "loader/safetensors_parser.h"
#include "test_util.h"

#include <gtest/gtest.h>

namespace ember::loader::test {
namespace {

// header JSON + data_bytes zero bytes of data.
std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes) {
  Bytes b;
  b.put<uint64_t>(header.size());
  b.buf.insert(b.buf.end(), header.begin(), header.end());
  b.buf.resize(b.buf.size() + data_bytes, 0);
  return b.buf;
}

Result<SafetensorsFile> parse(const std::vector<uint8_t>& bytes) {
  return parse_safetensors(bytes.data(), bytes.size(), "m.safetensors");
}

TEST(SafetensorsParse, ValidHandMadeFile) {
  // Header padded with spaces (as writers do) so the data section is 8-aligned.
  std::string h = R"({"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
                  R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  h.resize((h.size() + 7) / 8 * 8, ' ');
  auto f = parse(make_file(h, 32));
  ASSERT_TRUE(f.is_ok()) << f.message();
  ASSERT_EQ(f->tensors.size(), 2u);
  EXPECT_EQ(f->data_offset, 8 + h.size());
  EXPECT_EQ(f->tensors[0].name, "a");  // sorted by offset
  EXPECT_EQ(f->tensors[0].file_offset, 8 + h.size());
  EXPECT_EQ(f->tensors[0].nbytes, 24u);
  EXPECT_EQ(f->tensors[1].dtype, DType::BF16);
  EXPECT_EQ(f->tensors[1].n_dims, 1);
  EXPECT_EQ(f->tensors[1].file_offset, 8 + h.size() + 24);
}

struct Case {
  const char* what;
  std::string header;
  size_t data_bytes;
  const char* message;
};

TEST(SafetensorsBadInput, BrokenHeadersAreNamedErrors) {
  const std::string ok_a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::vector<Case> cases = {
      {"invalid JSON", "{\"a\": ", 0, "invalid JSON header"},
      {"not an object", "[1,2,3]", 0, "not an object"},
      {"invalid UTF-8", "{\"\xff\":1}", 0, "invalid JSON header"},
      {"entry not object", R"({"a":5})", 0, "tensor 'a': header entry is not an object"},
      {"missing dtype", R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4, "tensor 'a': missing"},
      {"dtype not string", R"({"a":{"dtype":1,"shape":[1],"data_offsets":[0,4]}})", 4,
       "dtype"},
      {"unsupported dtype", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 4,
       "tensor 'a': unsupported dtype 'U8'"},
      {"bool dtype", R"({"a":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})", 4,
       "unsupported dtype 'BOOL'"},
      {"shape not array", R"({"a":{"dtype":"F32","shape":3,"data_offsets":[0,12]}})", 12,
       "shape"},
      {"negative dim", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
       "tensor 'a': dimension 0"},
      {"float dim", R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
       "dimension 0"},
      {"rank 5", R"({"a":{"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]}})", 4,
       "5 dimensions"},
      {"numel overflow",
       R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4,
       "overflows"},
      {"bytes overflow", R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}})",
       4, "byte size overflows"},
      {"one offset", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
       "data_offsets must be"},
      {"negative offset", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4,
       "data_offsets must be"},
      {"begin after end", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
       "tensor 'a': data_offsets [8, 4)"},
      {"end past data", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4,
       "outside the data section of 4 bytes"},
      {"huge end", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})",
       4, "outside the data section"},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "tensor 'a': data_offsets [0, 8) hold 8 bytes but shape [3] of F32 needs 12"},
      {"overlap",
       "{" + ok_a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12,
       "overlap"},
      {"misaligned",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", 8, "not aligned"},
      {"duplicate name", "{" + ok_a + "," + ok_a + "}", 8, "duplicate tensor 'a'"},
      {"bad __metadata__", R"({"__metadata__":[1]})", 0, "__metadata__"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    // Pad the header to keep the data section 8-aligned unless alignment is the point.
    std::string h = c.header;
    h.resize((h.size() + 7) / 8 * 8, ' ');
    auto f = parse(make_file(h, c.data_bytes));
    ASSERT_FALSE(f.is_ok()) << c.what << " was accepted";
    EXPECT_NE(f.message().find("m.safetensors: "), std::string::npos) << f.message();
    EXPECT_NE(f.message().find(c.message), std::string::npos) << f.message();
  }
}

TEST(SafetensorsBadInput, HeaderLengthErrors) {
  std::vector<uint8_t> tiny = {1, 2, 3};
  auto f = parse(tiny);
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.message().find("truncated"), std::string::npos) << f.message();

  Bytes b;
  b.put<uint64_t>(1000);
  b.buf.resize(100, ' ');
  f = parse(b.buf);
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.message().find("header length 1000 exceeds file size 100"), std::string::npos)
      << f.message();

  b.set<uint64_t>(0, 0xffffffffffffffffull);
  f = parse(b.buf);
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.message().find("exceeds file size"), std::string::npos) << f.message();
}

TEST(SafetensorsBadInput, EveryTruncationOfARealFileFails) {
  const auto bytes = read_file(fixture("hf_single/model.safetensors"));
  ASSERT_TRUE(parse(bytes).is_ok());
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(len));
    auto f = parse(cut);
    ASSERT_FALSE(f.is_ok()) << "truncated to " << len << " bytes was accepted";
  }
}

TEST(SafetensorsBadInput, EverySingleByteCorruptionOfTheHeaderIsSafe) {
  const auto bytes = read_file(fixture("hf_single/model.safetensors"));
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  size_t n_errors = 0;
  for (size_t i = 0; i < 8 + header_len; ++i) {
    for (uint8_t v : {uint8_t{'9'}, uint8_t{'"'}, uint8_t{0xff}, uint8_t{'-'}}) {
      auto copy = bytes;
      copy[i] = v;
      n_errors += parse(copy).is_ok() ? 0 : 1;
    }
  }
  EXPECT_GT(n_errors, header_len);
}

}  // namespace
}  // namespace ember::loader::test
