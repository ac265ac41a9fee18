#include "core/tensor.h"

namespace ember {

std::string shape_string(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.n_dims; ++i) {
    if (i) s += ", ";
    s += std::to_string(t.shape[static_cast<size_t>(i)]);
  }
  return s + "]";
}

}  // namespace ember
