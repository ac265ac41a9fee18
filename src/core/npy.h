#pragma once
// Writes float32 arrays as NumPy .npy (version 1.0), for `ember logits` and fixtures.
#include "core/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ember {

Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // converted to float32 from f4/f8/i4/i8
};
// Reads a little-endian C-order .npy of dtype <f4, <f8, <i4 or <i8.
Result<NpyArray> read_npy(const std::string& path);

}  // namespace ember
