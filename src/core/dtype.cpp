#include "core/dtype.h"

namespace ember {

std::optional<DTypeTraits> dtype_traits(DType t) {
  switch (t) {
    case DType::F32: return DTypeTraits{"f32", 1, 4, false};
    case DType::F16: return DTypeTraits{"f16", 1, 2, false};
    case DType::BF16: return DTypeTraits{"bf16", 1, 2, false};
    case DType::F64: return DTypeTraits{"f64", 1, 8, false};
    case DType::I8: return DTypeTraits{"i8", 1, 1, false};
    case DType::I16: return DTypeTraits{"i16", 1, 2, false};
    case DType::I32: return DTypeTraits{"i32", 1, 4, false};
    case DType::I64: return DTypeTraits{"i64", 1, 8, false};
    case DType::Q4_0: return DTypeTraits{"q4_0", 32, 18, true};
    case DType::Q4_1: return DTypeTraits{"q4_1", 32, 20, true};
    case DType::Q5_0: return DTypeTraits{"q5_0", 32, 22, true};
    case DType::Q5_1: return DTypeTraits{"q5_1", 32, 24, true};
    case DType::Q8_0: return DTypeTraits{"q8_0", 32, 34, true};
    case DType::Q8_1: return DTypeTraits{"q8_1", 32, 36, true};
    case DType::Q2_K: return DTypeTraits{"q2_k", 256, 84, true};
    case DType::Q3_K: return DTypeTraits{"q3_k", 256, 110, true};
    case DType::Q4_K: return DTypeTraits{"q4_k", 256, 144, true};
    case DType::Q5_K: return DTypeTraits{"q5_k", 256, 176, true};
    case DType::Q6_K: return DTypeTraits{"q6_k", 256, 210, true};
    case DType::Q8_K: return DTypeTraits{"q8_k", 256, 292, true};
    case DType::FP8_E4M3: return DTypeTraits{"fp8_e4m3", 1, 1, true};
    case DType::FP8_E5M2: return DTypeTraits{"fp8_e5m2", 1, 1, true};
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_ggml_id(int32_t id) {
  auto t = static_cast<DType>(id);
  if (id >= 1000 || !dtype_traits(t)) return std::nullopt;
  return t;
}

std::string_view dtype_name(DType t) {
  auto tr = dtype_traits(t);
  return tr ? tr->name : std::string_view("unknown");
}

}  // namespace ember
