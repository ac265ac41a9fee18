#pragma once
// Read-only memory image of a file. It starts as a mapping of the file (page cache, shared,
// nothing copied, pages read in on first touch) placed on a 2 MiB boundary; make_resident()
// then moves the bytes into private anonymous memory advised for transparent huge pages, at
// the same addresses, so views into the image stay valid.
//
// Why: decode streams every weight once per token, and on the machine measured (docs/
// PERFORMANCE.md, "Weights in memory"; bench/memory/read-bandwidth.sh) anonymous 2 MiB pages
// streamed faster than the page-cache mapping in most sittings (e.g. 33 vs 14 GB/s; fewer TLB
// misses and page walks), and decode ran 10-22% faster with the weights moved.
#include "core/status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
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
  bool resident() const { return resident_; }

  // Copies the image into huge-page memory in place of the mapping (idempotent). The file
  // pages are dropped from this process as they are copied, so peak memory stays about one
  // image. progress(done_bytes, total_bytes) is called per chunk.
  Status make_resident(const std::function<void(size_t, size_t)>& progress = {});

 private:
  MmapFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t reserved_ = 0;  // bytes of address space from data_ (whole huge pages)
  bool resident_ = false;
  std::string path_;
};

}  // namespace ember
