// GGUF writer (layout: see gguf_parser.cpp). Little-endian, as every target ember builds for.
#include "loader/gguf_writer.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace ember::loader {

namespace {

template <typename T>
void put(std::string* out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

void put_string(std::string* out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out->append(s);
}

const char* type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "uint8";
    case GgufType::INT8: return "int8";
    case GgufType::UINT16: return "uint16";
    case GgufType::INT16: return "int16";
    case GgufType::UINT32: return "uint32";
    case GgufType::INT32: return "int32";
    case GgufType::FLOAT32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::UINT64: return "uint64";
    case GgufType::INT64: return "int64";
    case GgufType::FLOAT64: return "float64";
  }
  return "unknown";
}

// Integer of type T from a JSON number, if it is an integer within T's range.
template <typename T>
Status put_int(const nlohmann::json& v, GgufType t, std::string* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return Status::errorf("value {} does not fit {}", u, type_name(t));
    }
    put<T>(out, static_cast<T>(u));
    return Status::ok();
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        (i > 0 && static_cast<uint64_t>(i) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
      return Status::errorf("value {} does not fit {}", i, type_name(t));
    }
    put<T>(out, static_cast<T>(i));
    return Status::ok();
  }
  return Status::errorf("{} value is not an integer: {}", type_name(t), v.dump().substr(0, 40));
}

}  // namespace

Status gguf_encode_value(const nlohmann::json& v, const GgufValueType& type, std::string* out) {
  switch (type.type) {
    case GgufType::UINT8: return put_int<uint8_t>(v, type.type, out);
    case GgufType::INT8: return put_int<int8_t>(v, type.type, out);
    case GgufType::UINT16: return put_int<uint16_t>(v, type.type, out);
    case GgufType::INT16: return put_int<int16_t>(v, type.type, out);
    case GgufType::UINT32: return put_int<uint32_t>(v, type.type, out);
    case GgufType::INT32: return put_int<int32_t>(v, type.type, out);
    case GgufType::UINT64: return put_int<uint64_t>(v, type.type, out);
    case GgufType::INT64: return put_int<int64_t>(v, type.type, out);
    case GgufType::FLOAT32:
    case GgufType::FLOAT64:
      if (!v.is_number()) return Status::errorf("{} value is not a number", type_name(type.type));
      if (type.type == GgufType::FLOAT32) {
        put<float>(out, v.get<float>());
      } else {
        put<double>(out, v.get<double>());
      }
      return Status::ok();
    case GgufType::BOOL:
      if (!v.is_boolean()) return Status::error("bool value is not a boolean");
      put<uint8_t>(out, v.get<bool>() ? 1 : 0);
      return Status::ok();
    case GgufType::STRING:
      if (!v.is_string()) return Status::error("string value is not a string");
      put_string(out, v.get_ref<const std::string&>());
      return Status::ok();
    case GgufType::ARRAY: {
      if (!v.is_array()) return Status::error("array value is not an array");
      put<uint32_t>(out, static_cast<uint32_t>(type.elem));
      put<uint64_t>(out, v.size());
      if (type.elem == GgufType::ARRAY && type.items.size() != v.size()) {
        return Status::errorf("nested array of {} elements has {} element types", v.size(),
                              type.items.size());
      }
      GgufValueType elem = gguf_type(type.elem);
      for (size_t i = 0; i < v.size(); ++i) {
        const GgufValueType& et = type.elem == GgufType::ARRAY ? type.items[i] : elem;
        Status st = gguf_encode_value(v[i], et, out);
        if (!st) return st.with_context(fmt::format("element {}", i));
      }
      return Status::ok();
    }
  }
  return Status::errorf("unknown value type {}", static_cast<uint32_t>(type.type));
}

size_t GgufWriterTensor::nbytes() const {
  int64_t numel = 1;
  for (int d = 0; d < n_dims; ++d) numel *= ne[static_cast<size_t>(d)];
  return dtype_row_bytes(dtype, ne[0]) * static_cast<size_t>(numel / ne[0]);
}

GgufWriter::GgufWriter(std::string path, uint64_t alignment)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), alignment_(alignment) {}

GgufWriter::~GgufWriter() {
  if (!finished_) abandon();
}

void GgufWriter::abandon() {
  if (file_) {
    std::fclose(file_);
    file_ = nullptr;
    std::remove(tmp_path_.c_str());
  }
}

Status GgufWriter::fail_io(const std::string& what) {
  const int err = errno;
  abandon();
  return Status::errorf("{}: {}: {}", tmp_path_, what, err ? std::strerror(err) : "I/O error");
}

Status GgufWriter::set(const std::string& key, const nlohmann::json& value,
                       const GgufValueType& type) {
  std::string probe;  // validate now, so begin() cannot fail on a value
  Status st = gguf_encode_value(value, type, &probe);
  if (!st) return st.with_context(fmt::format("{}: metadata key '{}'", path_, key));
  for (size_t i = 0; i < kv_.size(); ++i) {
    if (kv_[i].first == key) {
      kv_[i].second = value;
      kv_types_[i] = type;
      return Status::ok();
    }
  }
  kv_.emplace_back(key, value);
  kv_types_.push_back(type);
  return Status::ok();
}

Status GgufWriter::add_tensor(const GgufWriterTensor& t) {
  if (file_ || finished_) return Status::errorf("{}: tensor '{}' added after begin()", path_, t.name);
  const auto traits = dtype_traits(t.dtype);
  if (!traits || t.dtype == DType::FP8_E4M3 || t.dtype == DType::FP8_E5M2) {
    return Status::errorf("{}: tensor '{}': type {} has no GGML id", path_, t.name,
                          static_cast<int>(t.dtype));
  }
  if (t.n_dims < 1 || t.n_dims > 4 || t.ne[0] % traits->block_size != 0) {
    return Status::errorf("{}: tensor '{}': bad shape for {}", path_, t.name, traits->name);
  }
  for (const auto& other : tensors_) {
    if (other.name == t.name) return Status::errorf("{}: duplicate tensor '{}'", path_, t.name);
  }
  tensors_.push_back(t);
  return Status::ok();
}

Status GgufWriter::write(const void* p, size_t n) {
  if (n == 0) return Status::ok();
  errno = 0;
  if (std::fwrite(p, 1, n, file_) != n) return fail_io("write failed");
  written_ += n;
  return Status::ok();
}

Status GgufWriter::begin() {
  if (file_ || finished_) return Status::errorf("{}: begin() called twice", path_);
  std::string head;
  head.append("GGUF", 4);
  put<uint32_t>(&head, 3);
  put<uint64_t>(&head, tensors_.size());
  put<uint64_t>(&head, kv_.size());
  for (size_t i = 0; i < kv_.size(); ++i) {
    put_string(&head, kv_[i].first);
    put<uint32_t>(&head, static_cast<uint32_t>(kv_types_[i].type));
    EMBER_RETURN_IF_ERROR(gguf_encode_value(kv_[i].second, kv_types_[i], &head));
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(&head, t.name);
    put<uint32_t>(&head, static_cast<uint32_t>(t.n_dims));
    for (int d = 0; d < t.n_dims; ++d) put<uint64_t>(&head, static_cast<uint64_t>(t.ne[static_cast<size_t>(d)]));
    put<uint32_t>(&head, static_cast<uint32_t>(t.dtype));
    put<uint64_t>(&head, offset);
    offset += (t.nbytes() + alignment_ - 1) / alignment_ * alignment_;
  }
  head.resize((head.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
  errno = 0;
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_) {
    return Status::errorf("{}: cannot create: {}", tmp_path_,
                          errno ? std::strerror(errno) : "unknown error");
  }
  return write(head.data(), head.size());
}

Status GgufWriter::write_tensor_data(const void* data, size_t n) {
  if (!file_) return Status::errorf("{}: tensor data written before begin()", path_);
  if (next_tensor_ >= tensors_.size()) return Status::errorf("{}: more tensor data than tensors", path_);
  const auto& t = tensors_[next_tensor_];
  if (n != t.nbytes()) {
    return Status::errorf("{}: tensor '{}': {} bytes given, {} expected", path_, t.name, n, t.nbytes());
  }
  EMBER_RETURN_IF_ERROR(write(data, n));
  ++next_tensor_;
  const size_t pad = static_cast<size_t>((alignment_ - n % alignment_) % alignment_);
  const std::string padding(pad, '\0');  // after the last tensor too, as gguf-py does
  return write(padding.data(), pad);
}

Status GgufWriter::finish() {
  if (!file_) return Status::errorf("{}: finish() without begin()", path_);
  if (next_tensor_ != tensors_.size()) {
    abandon();
    return Status::errorf("{}: {} of {} tensors written", path_, next_tensor_, tensors_.size());
  }
  errno = 0;
  if (std::fflush(file_) != 0) return fail_io("write failed");
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) {
    const int err = errno;
    std::remove(tmp_path_.c_str());
    return Status::errorf("{}: close failed: {}", tmp_path_, err ? std::strerror(err) : "I/O error");
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_path_.c_str());
    return Status::errorf("{}: cannot rename {} to it: {}", path_, tmp_path_, std::strerror(err));
  }
  finished_ = true;
  return Status::ok();
}

}  // namespace ember::loader
