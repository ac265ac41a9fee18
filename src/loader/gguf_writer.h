#pragma once
// GgufWriter: writes a GGUF v3 file: metadata of every GGUF value type (nested arrays
// included, each value written as the GgufValueType it is given), tensor infos and the tensor
// data, each tensor aligned to `alignment`. Data is streamed tensor by tensor, so a writer
// never holds more than one tensor. The file is written as PATH.tmp and renamed to PATH by
// finish(); every failure (unwritable path, full disk, a value that does not fit its type) is
// a Status naming the file, and an unfinished writer removes its PATH.tmp.
#include "core/dtype.h"
#include "core/status.h"
#include "loader/gguf_parser.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ember::loader {

struct GgufWriterTensor {
  std::string name;
  DType dtype = DType::F32;
  int n_dims = 1;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // GGML order: ne[0] is the contiguous dimension
  size_t nbytes() const;
};

class GgufWriter {
 public:
  explicit GgufWriter(std::string path, uint64_t alignment = kGgufDefaultAlignment);
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Adds a metadata key, or replaces its value and type where it is already set (keeping its
  // position). Error if the value does not fit the type (a negative UINT32, a string for an
  // INT32, nested arrays without a type per element).
  Status set(const std::string& key, const nlohmann::json& value, const GgufValueType& type);
  // Adds a tensor; data is written in the order tensors are added.
  Status add_tensor(const GgufWriterTensor& t);

  // Creates PATH.tmp and writes the header, the metadata and the tensor infos.
  Status begin();
  // Writes the data of the next tensor; n must be its byte size.
  Status write_tensor_data(const void* data, size_t n);
  // After the last tensor: flushes, closes and renames PATH.tmp to PATH.
  Status finish();

  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return written_; }

 private:
  Status write(const void* p, size_t n);
  Status fail_io(const std::string& what);
  void abandon();

  std::string path_, tmp_path_;
  uint64_t alignment_;
  std::vector<std::pair<std::string, nlohmann::json>> kv_;
  std::vector<GgufValueType> kv_types_;
  std::vector<GgufWriterTensor> tensors_;
  std::FILE* file_ = nullptr;
  size_t next_tensor_ = 0;
  uint64_t written_ = 0;
  bool finished_ = false;
};

// Serializes one metadata value (no key, no type tag) as GGUF bytes, appended to out.
Status gguf_encode_value(const nlohmann::json& value, const GgufValueType& type,
                         std::string* out);

// A scalar type (or an array of scalars, elem set) for convenience.
inline GgufValueType gguf_type(GgufType t, GgufType elem = GgufType::UINT8) {
  GgufValueType v;
  v.type = t;
  v.elem = elem;
  return v;
}

}  // namespace ember::loader
