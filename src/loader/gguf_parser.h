#pragma once
// GGUF (v2, v3) parsing from bytes in memory: header, metadata, tensor infos, data offsets.
// Every count, length, dimension and offset is validated against the buffer, so the result
// can be trusted to index into `data` (the fuzzers call parse_gguf directly).
#include "core/dtype.h"
#include "core/status.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ember::loader {

struct GgufTensorInfo {
  std::string name;
  DType dtype = DType::F32;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // GGML order: ne[0] is the contiguous dimension
  size_t file_offset = 0;                 // absolute offset of the data in the file
  size_t nbytes = 0;
};

// GGUF metadata value types (gguf_type).
enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

// The stored type of a metadata value, which JSON does not keep (uint32 and int32 are both
// numbers): what a writer needs to write the value back as the same GGUF type.
struct GgufValueType {
  GgufType type = GgufType::UINT8;
  GgufType elem = GgufType::UINT8;   // ARRAY: element type
  std::vector<GgufValueType> items;  // ARRAY of ARRAY: the type of each element
};

struct GgufFile {
  uint32_t version = 0;
  uint64_t alignment = 32;
  size_t data_offset = 0;      // start of the tensor data section
  nlohmann::json metadata;     // key -> value; arrays (also nested, also of strings) as arrays
  std::vector<std::string> metadata_keys;                // in file order
  std::map<std::string, GgufValueType> metadata_types;  // key -> stored type
  std::vector<GgufTensorInfo> tensors;  // in file order
};

constexpr uint64_t kGgufDefaultAlignment = 32;

// Parses a whole GGUF file held in [data, data + size). `name` prefixes every error.
Result<GgufFile> parse_gguf(const uint8_t* data, size_t size, const std::string& name);

}  // namespace ember::loader
