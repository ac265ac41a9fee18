#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ember {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kCopyChunk = size_t{2} << 20;  // bounds the file pages held beside the copy

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// `bytes` (a multiple of kHugePage) of inaccessible address space starting on a 2 MiB boundary.
Result<uint8_t*> reserve_aligned(size_t bytes) {
  void* raw = ::mmap(nullptr, bytes + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return Status::errorf("cannot reserve {} MiB of address space: {}", bytes >> 20, std::strerror(errno));
  auto* base = static_cast<uint8_t*>(raw);
  const size_t lead = (kHugePage - reinterpret_cast<uintptr_t>(base) % kHugePage) % kHugePage;
  if (lead > 0) ::munmap(base, lead);
  if (kHugePage - lead > 0) ::munmap(base + lead + bytes, kHugePage - lead);
  return base + lead;
}

}  // namespace

Result<std::shared_ptr<MmapFile>> MmapFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::errorf("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::errorf("{}: not a regular file", path);
  }
  std::shared_ptr<MmapFile> f(new MmapFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    const size_t reserved = round_up(f->size_, kHugePage);
    auto base = reserve_aligned(reserved);
    if (!base.is_ok()) {
      ::close(fd);
      return Status::errorf("{}: {}", path, base.status().message());
    }
    void* p = ::mmap(*base, f->size_, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::munmap(*base, reserved);
      ::close(fd);
      return Status::errorf("{}: mmap failed: {}", path, std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    f->reserved_ = reserved;
  }
  ::close(fd);
  return f;
}

Status MmapFile::make_resident(const std::function<void(size_t, size_t)>& progress) {
  if (resident_ || size_ == 0) return Status::ok();
  EMBER_ASSIGN_OR_RETURN(uint8_t * img, reserve_aligned(reserved_));
  if (::mprotect(img, reserved_, PROT_READ | PROT_WRITE) != 0) {
    const int err = errno;
    ::munmap(img, reserved_);
    return Status::errorf("{}: cannot allocate {} MiB for the weights: {}", path_, reserved_ >> 20, std::strerror(err));
  }
  ::madvise(img, reserved_, MADV_HUGEPAGE);  // advisory: without THP this is plain memory
  auto* src = const_cast<uint8_t*>(data_);
  for (size_t done = 0; done < size_;) {
    const size_t n = std::min(kCopyChunk, size_ - done);
    std::memcpy(img + done, src + done, n);
    // Drop the copied file pages from this process (they stay in the page cache).
    const size_t lo = done / 4096 * 4096;
    ::madvise(src + lo, done + n - lo, MADV_DONTNEED);
    done += n;
    if (progress) progress(done, size_);
  }
  ::mprotect(img, reserved_, PROT_READ);  // a stray write faults, as it did on the mapping
  // Put the copy where the mapping was: same addresses, so every view stays valid. The
  // moved range is 2 MiB aligned at both ends, so its huge pages move whole.
  void* moved = ::mremap(img, reserved_, reserved_, MREMAP_MAYMOVE | MREMAP_FIXED, src);
  if (moved == MAP_FAILED) {
    const int err = errno;
    ::munmap(img, reserved_);
    return Status::errorf("{}: cannot move the weights into place: {}", path_, std::strerror(err));
  }
  resident_ = true;
  return Status::ok();
}

MmapFile::~MmapFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), reserved_);
}

}  // namespace ember
