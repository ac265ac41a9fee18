#pragma once
// Helpers for the loader tests: fixture paths, file bytes, a hash, and a little-endian
// byte builder for hand-made (and deliberately broken) GGUF / safetensors files.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace ember::loader::test {

inline std::string fixture(const std::string& rel) {
  return std::string(EMBER_FORMAT_FIXTURES) + "/" + rel;
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::filesystem::path& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

inline void write_file(const std::filesystem::path& path, std::string_view s) {
  write_file(path, s.data(), s.size());
}

inline std::string fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// A fresh empty directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("ember_loader_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

class Bytes {
 public:
  template <typename T>
  size_t put(T v) {
    const size_t at = buf.size();
    buf.resize(at + sizeof(T));
    std::memcpy(buf.data() + at, &v, sizeof(T));
    return at;
  }
  size_t put_str(std::string_view s) {  // GGUF string: u64 length + bytes
    const size_t at = put<uint64_t>(s.size());
    buf.insert(buf.end(), s.begin(), s.end());
    return at;
  }
  void pad_to(size_t alignment) {
    while (buf.size() % alignment != 0) buf.push_back(0);
  }
  template <typename T>
  void set(size_t at, T v) {
    std::memcpy(buf.data() + at, &v, sizeof(T));
  }
  std::vector<uint8_t> buf;
};

}  // namespace ember::loader::test
