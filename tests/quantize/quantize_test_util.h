#pragma once
// Helpers for the quantize tests: run a shell command, read a GGUF file with ember's parser.
#include "core/mmap_file.h"
#include "loader/gguf_parser.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <sys/wait.h>

namespace ember::test {

struct CmdResult {
  int rc = -1;
  std::string output;  // stdout and stderr
};

inline CmdResult run_cmd(const std::string& cmd) {
  CmdResult r;
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return r;
}

inline std::string ember_quantize(const std::string& args) {
  return std::string(EMBER_BIN) + " quantize " + args;
}

struct GgufOnDisk {
  std::shared_ptr<MmapFile> file;
  loader::GgufFile gguf;
  const loader::GgufTensorInfo* find(const std::string& name) const {
    for (const auto& t : gguf.tensors) if (t.name == name) return &t;
    return nullptr;
  }
  const uint8_t* data(const loader::GgufTensorInfo& t) const { return file->data() + t.file_offset; }
};

inline Result<GgufOnDisk> read_gguf(const std::string& path) {
  EMBER_ASSIGN_OR_RETURN(auto f, MmapFile::open(path));
  EMBER_ASSIGN_OR_RETURN(auto g, loader::parse_gguf(f->data(), f->size(), path));
  return GgufOnDisk{f, std::move(g)};
}

// A fresh temporary directory per test.
inline std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("ember-quantize-test-" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace ember::test
