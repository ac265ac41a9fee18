#pragma once
// safetensors parsing from bytes in memory: u64 header length, JSON header, data section.
// Header entries: name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the data section) and an optional "__metadata__" object.
#include "core/dtype.h"
#include "core/status.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::loader {

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::F32;
  int n_dims = 0;
  std::array<int64_t, 4> shape{0, 0, 0, 0};  // outermost first, as in the file
  size_t file_offset = 0;                    // absolute offset of the data in the file
  size_t nbytes = 0;
};

struct SafetensorsFile {
  size_t data_offset = 0;   // 8 + header length
  nlohmann::json metadata;  // "__metadata__" (an empty object when absent)
  std::vector<SafetensorsTensorInfo> tensors;  // sorted by data offset
};

// dtypes ember maps: F32, F16, BF16 (the ones models use) and F64, I8..I64, F8_E4M3,
// F8_E5M2 (seen in FP8 checkpoints and buffers); anything else is an error naming it.
Result<SafetensorsFile> parse_safetensors(const uint8_t* data, size_t size,
                                          const std::string& name);

}  // namespace ember::loader
