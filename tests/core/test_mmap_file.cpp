// MmapFile: the mapped image and the move into huge-page memory (same bytes, same addresses).
#include "core/mmap_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>
#include <vector>

namespace ember {
namespace {

std::filesystem::path write_temp(const std::vector<uint8_t>& bytes, const char* name) {
  const auto p = std::filesystem::temp_directory_path() / (std::string("ember_mmap_") + name + "_" +
                                                           std::to_string(::getpid()));
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                           static_cast<std::streamsize>(bytes.size()));
  return p;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(MmapFile, MapsOnAHugePageBoundary) {
  const auto bytes = random_bytes(12345, 1);
  const auto p = write_temp(bytes, "map");
  auto f = MmapFile::open(p.string());
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ((*f)->size(), bytes.size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*f)->data()) % (2u << 20), 0u);
  EXPECT_EQ(std::memcmp((*f)->data(), bytes.data(), bytes.size()), 0);
  EXPECT_FALSE((*f)->resident());
  std::filesystem::remove(p);
}

TEST(MmapFile, MakeResidentKeepsBytesAndAddresses) {
  // Several copy chunks and a ragged end.
  for (size_t n : {size_t{1}, size_t{4096}, (size_t{5} << 20) + 777}) {
    SCOPED_TRACE(n);
    const auto bytes = random_bytes(n, static_cast<uint32_t>(n));
    const auto p = write_temp(bytes, "resident");
    auto f = MmapFile::open(p.string());
    ASSERT_TRUE(f.is_ok()) << f.message();
    const uint8_t* before = (*f)->data();
    const uint8_t* view = before + n / 2;  // a tensor view taken before the move
    const uint8_t expect = bytes[n / 2];
    size_t last_done = 0, calls = 0;
    ASSERT_TRUE((*f)->make_resident([&](size_t done, size_t total) {
                  EXPECT_EQ(total, n);
                  EXPECT_GT(done, last_done);
                  last_done = done;
                  ++calls;
                }).is_ok());
    EXPECT_TRUE((*f)->resident());
    EXPECT_EQ((*f)->data(), before);
    EXPECT_EQ(*view, expect);
    EXPECT_EQ(last_done, n);
    EXPECT_GE(calls, 1u);
    EXPECT_EQ(std::memcmp((*f)->data(), bytes.data(), n), 0);
    // Idempotent, and the file itself is no longer needed.
    std::filesystem::remove(p);
    EXPECT_TRUE((*f)->make_resident().is_ok());
    EXPECT_EQ(std::memcmp((*f)->data(), bytes.data(), n), 0);
  }
}

TEST(MmapFile, EmptyFileAndErrors) {
  const auto p = write_temp({}, "empty");
  auto f = MmapFile::open(p.string());
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ((*f)->size(), 0u);
  EXPECT_TRUE((*f)->make_resident().is_ok());
  std::filesystem::remove(p);
  auto missing = MmapFile::open(p.string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("cannot open"), std::string::npos);
  auto dir = MmapFile::open(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(dir.is_ok());
  EXPECT_NE(dir.message().find("not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace ember
