// safetensors parser: every entry is checked against the data section (bounds, size =
// numel * element size, alignment of the element type, no overlaps) before any view exists.
#include "loader/safetensors_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>

namespace ember::loader {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

std::optional<DType> dtype_from_safetensors(std::string_view s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  if (s == "F64") return DType::F64;
  if (s == "I8") return DType::I8;
  if (s == "I16") return DType::I16;
  if (s == "I32") return DType::I32;
  if (s == "I64") return DType::I64;
  if (s == "F8_E4M3") return DType::FP8_E4M3;
  if (s == "F8_E5M2") return DType::FP8_E5M2;
  return std::nullopt;
}

class SafetensorsParser {
 public:
  SafetensorsParser(const uint8_t* data, size_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}
  Result<SafetensorsFile> parse();

 private:
  Status fail(const std::string& what) const { return Status::errorf("{}: {}", name_, what); }
  Status parse_entry(const std::string& key, const nlohmann::json& v,
                     SafetensorsTensorInfo* t) const;
  Status check_overlaps(const std::vector<SafetensorsTensorInfo>& sorted) const;

  const uint8_t* data_;
  size_t size_;
  size_t data_size_ = 0;
  size_t data_offset_ = 0;
  const std::string& name_;
};

Status SafetensorsParser::parse_entry(const std::string& key, const nlohmann::json& v,
                                      SafetensorsTensorInfo* t) const {
  const std::string where = fmt::format("tensor '{}'", key);
  if (!v.is_object()) return fail(where + ": header entry is not an object");
  auto dt = v.find("dtype");
  auto sh = v.find("shape");
  auto off = v.find("data_offsets");
  if (dt == v.end() || !dt->is_string()) return fail(where + ": missing or non-string dtype");
  if (sh == v.end() || !sh->is_array()) return fail(where + ": missing or non-array shape");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return fail(where + ": data_offsets must be two non-negative integers");
  }
  const std::string& dtype_str = dt->get_ref<const std::string&>();
  const auto dtype = dtype_from_safetensors(dtype_str);
  if (!dtype) return fail(fmt::format("{}: unsupported dtype '{}'", where, dtype_str));
  if (sh->size() > 4) return fail(fmt::format("{}: {} dimensions (at most 4)", where, sh->size()));
  t->name = key;
  t->dtype = *dtype;
  t->n_dims = static_cast<int>(sh->size());
  uint64_t numel = 1;
  for (int d = 0; d < t->n_dims; ++d) {
    const auto& dim = (*sh)[static_cast<size_t>(d)];
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return fail(fmt::format("{}: dimension {} is not a non-negative integer", where, d));
    }
    t->shape[static_cast<size_t>(d)] = static_cast<int64_t>(dim.get<uint64_t>());
    if (__builtin_mul_overflow(numel, dim.get<uint64_t>(), &numel) || numel > INT64_MAX) {
      return fail(where + ": element count overflows");
    }
  }
  const size_t elem = dtype_block_bytes(*dtype);
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(elem), &nbytes)) {
    return fail(where + ": byte size overflows");
  }
  const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
  if (begin > end || end > data_size_) {
    return fail(fmt::format("{}: data_offsets [{}, {}) outside the data section of {} bytes",
                            where, begin, end, data_size_));
  }
  if (end - begin != nbytes) {
    return fail(fmt::format("{}: data_offsets [{}, {}) hold {} bytes but shape {} of {} needs {}",
                            where, begin, end, end - begin, sh->dump(), dtype_str, nbytes));
  }
  t->file_offset = data_offset_ + static_cast<size_t>(begin);
  t->nbytes = static_cast<size_t>(nbytes);
  if (t->file_offset % elem != 0) {  // views are typed pointers into the mapping
    return fail(fmt::format("{}: data at file offset {} is not aligned to its {}-byte elements",
                            where, t->file_offset, elem));
  }
  return Status::ok();
}

Status SafetensorsParser::check_overlaps(const std::vector<SafetensorsTensorInfo>& sorted) const {
  const SafetensorsTensorInfo* prev = nullptr;
  for (const auto& t : sorted) {
    if (t.nbytes == 0) continue;
    if (prev != nullptr && t.file_offset < prev->file_offset + prev->nbytes) {
      return fail(fmt::format("tensors '{}' and '{}' overlap", prev->name, t.name));
    }
    prev = &t;
  }
  return Status::ok();
}

Result<SafetensorsFile> SafetensorsParser::parse() {
  uint64_t header_len = 0;
  if (size_ < 8) return fail(fmt::format("truncated: {} bytes, no header length", size_));
  std::memcpy(&header_len, data_, 8);
  if (header_len > size_ - 8) {
    return fail(fmt::format("header length {} exceeds file size {}", header_len, size_));
  }
  if (header_len > kMaxHeaderBytes) return fail(fmt::format("header of {} bytes too large", header_len));
  data_offset_ = 8 + static_cast<size_t>(header_len);
  data_size_ = size_ - data_offset_;

  // nlohmann::json keeps the last of duplicate keys; the callback sees them all.
  std::set<std::string> seen;
  std::optional<std::string> duplicate;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && !duplicate) {
      if (!seen.insert(parsed.get<std::string>()).second) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json header;
  try {
    const auto* begin = reinterpret_cast<const char*>(data_ + 8);
    header = nlohmann::json::parse(begin, begin + header_len, on_event);
  } catch (const nlohmann::json::exception& e) {
    return fail(fmt::format("invalid JSON header: {}", e.what()));
  }
  if (!header.is_object()) return fail("JSON header is not an object");
  if (duplicate) return fail(fmt::format("duplicate tensor '{}' in header", *duplicate));

  SafetensorsFile f;
  f.data_offset = data_offset_;
  f.metadata = nlohmann::json::object();
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return fail("__metadata__ is not an object");
      f.metadata = value;
      continue;
    }
    SafetensorsTensorInfo t;
    EMBER_RETURN_IF_ERROR(parse_entry(key, value, &t));
    f.tensors.push_back(std::move(t));
  }
  std::sort(f.tensors.begin(), f.tensors.end(), [](const auto& a, const auto& b) {
    return a.file_offset != b.file_offset ? a.file_offset < b.file_offset : a.nbytes < b.nbytes;
  });
  EMBER_RETURN_IF_ERROR(check_overlaps(f.tensors));
  return f;
}

}  // namespace

Result<SafetensorsFile> parse_safetensors(const uint8_t* data, size_t size,
                                          const std::string& name) {
  return SafetensorsParser(data, size, name).parse();
}

}  // namespace ember::loader
