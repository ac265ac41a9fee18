#pragma once
// Element types of tensors: plain floats/ints and block-quantized formats.
// Values of the quantized ones equal GGML's type ids so GGUF files map directly.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ember {

enum class DType : int32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  // ember-only formats (ids outside GGML's range).
  FP8_E4M3 = 1000,
  FP8_E5M2 = 1001,
};

struct DTypeTraits {
  std::string_view name;
  int64_t block_size;   // elements per block (1 for plain types)
  size_t block_bytes;   // bytes per block
  bool quantized;
};

// Traits of a known dtype; nullopt for ids ember does not know (e.g. from a hostile file).
std::optional<DTypeTraits> dtype_traits(DType t);
std::optional<DType> dtype_from_ggml_id(int32_t id);
std::string_view dtype_name(DType t);
inline int64_t dtype_block_size(DType t) { return dtype_traits(t)->block_size; }
inline size_t dtype_block_bytes(DType t) { return dtype_traits(t)->block_bytes; }
inline bool dtype_is_quantized(DType t) { return dtype_traits(t)->quantized; }
// Bytes of one row of n elements; n must be a multiple of the block size.
inline size_t dtype_row_bytes(DType t, int64_t n) {
  auto tr = *dtype_traits(t);
  return static_cast<size_t>(n / tr.block_size) * tr.block_bytes;
}

}  // namespace ember
