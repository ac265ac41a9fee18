#pragma once
// Tensor: a non-owning view (data pointer, dtype, shape, device). Shapes are written
// outermost first, as in PyTorch: a weight of a linear layer is [n_out, n_in] and its
// rows (the last dimension) are contiguous. Block-quantized rows hold n_in / block_size blocks.
#include "core/dtype.h"

#include <array>
#include <cstdint>
#include <string>

namespace ember {

enum class Device : int32_t { CPU = 0, CUDA = 1 };

struct Tensor {
  static constexpr int kMaxDims = 4;
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::CPU;
  int n_dims = 0;
  std::array<int64_t, kMaxDims> shape{0, 0, 0, 0};

  int64_t dim(int i) const { return shape[static_cast<size_t>(i < 0 ? n_dims + i : i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < n_dims; ++i) n *= shape[static_cast<size_t>(i)];
    return n;
  }
  int64_t n_cols() const { return n_dims == 0 ? 1 : shape[static_cast<size_t>(n_dims - 1)]; }
  int64_t n_rows() const { return n_cols() == 0 ? 0 : numel() / n_cols(); }
  size_t row_bytes() const { return dtype_row_bytes(dtype, n_cols()); }
  size_t nbytes() const { return row_bytes() * static_cast<size_t>(n_rows()); }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  const uint8_t* row_ptr(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_bytes();
  }
  bool valid() const { return data != nullptr; }
};

inline Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                          Device device = Device::CPU) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  for (int64_t s : shape) t.shape[static_cast<size_t>(t.n_dims++)] = s;
  return t;
}

std::string shape_string(const Tensor& t);

}  // namespace ember
