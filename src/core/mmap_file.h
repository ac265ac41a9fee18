#pragma once
// Read-only memory-mapped file: model weights are viewed in place, never copied.
#include "core/status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ember {

class MmapFile {
 public:
  static Result<std::shared_ptr<MmapFile>> open(const std::string& path);
  ~MmapFile();
  MmapFile(const MmapFile&) = delete;
  MmapFile& operator=(const MmapFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MmapFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace ember
