// GGUF parser. Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv;
// n_kv x (string key, u32 type, value); n_tensors x (string name, u32 n_dims,
// u64 ne[n_dims], u32 ggml type, u64 offset); padding to general.alignment; tensor data.
// Strings are u64 length + bytes; arrays are u32 element type + u64 count + elements.
#include "loader/gguf_parser.h"

#include "loader/byte_reader.h"

#include <fmt/format.h>

#include <set>
#include <string_view>

namespace ember::loader {

namespace {

constexpr int kMaxArrayDepth = 8;

class GgufParser {
 public:
  GgufParser(const uint8_t* data, size_t size, const std::string& name)
      : r_(data, size), size_(size), name_(name) {}

  Result<GgufFile> parse();

 private:
  Status fail(const std::string& what) const { return Status::errorf("{}: {}", name_, what); }
  Status truncated(const std::string& what) const {
    return fail(fmt::format("truncated at offset {} reading {} (file size {})", r_.pos(), what,
                            size_));
  }
  Status read_string(std::string_view* out, const std::string& what);
  Status read_value(GgufType type, int depth, const std::string& key, nlohmann::json* out,
                    GgufValueType* out_type);
  Status read_array(int depth, const std::string& key, nlohmann::json* out,
                    GgufValueType* out_type);
  Status read_metadata(uint64_t n_kv, GgufFile* f);
  Status read_tensor_info(GgufTensorInfo* t);
  Status apply_alignment(GgufFile* f);
  Status place_tensors(GgufFile* f);

  ByteReader r_;
  size_t size_;
  const std::string& name_;
};

Status GgufParser::read_string(std::string_view* out, const std::string& what) {
  uint64_t len = 0;
  if (!r_.read(&len)) return truncated(what + " length");
  if (len > r_.remaining()) {
    return fail(fmt::format("{}: string length {} at offset {} exceeds file size {}", what, len,
                            r_.pos() - 8, size_));
  }
  r_.read_bytes(len, out);
  return Status::ok();
}

template <typename T>
Status read_scalar(ByteReader& r, nlohmann::json* out) {
  T v{};
  if (!r.read(&v)) return Status::error("");
  *out = v;
  return Status::ok();
}

Status GgufParser::read_value(GgufType type, int depth, const std::string& key,
                              nlohmann::json* out, GgufValueType* out_type) {
  out_type->type = type;
  Status st;
  switch (type) {
    case GgufType::UINT8: st = read_scalar<uint8_t>(r_, out); break;
    case GgufType::INT8: st = read_scalar<int8_t>(r_, out); break;
    case GgufType::UINT16: st = read_scalar<uint16_t>(r_, out); break;
    case GgufType::INT16: st = read_scalar<int16_t>(r_, out); break;
    case GgufType::UINT32: st = read_scalar<uint32_t>(r_, out); break;
    case GgufType::INT32: st = read_scalar<int32_t>(r_, out); break;
    case GgufType::UINT64: st = read_scalar<uint64_t>(r_, out); break;
    case GgufType::INT64: st = read_scalar<int64_t>(r_, out); break;
    case GgufType::FLOAT32: st = read_scalar<float>(r_, out); break;
    case GgufType::FLOAT64: st = read_scalar<double>(r_, out); break;
    case GgufType::BOOL: {
      uint8_t b;
      if (!r_.read(&b)) return truncated(fmt::format("value of key '{}'", key));
      if (b > 1) return fail(fmt::format("key '{}': invalid bool byte {}", key, b));
      *out = b != 0;
      return Status::ok();
    }
    case GgufType::STRING: {
      std::string_view s;
      EMBER_RETURN_IF_ERROR(read_string(&s, fmt::format("value of key '{}'", key)));
      *out = std::string(s);
      return Status::ok();
    }
    case GgufType::ARRAY: return read_array(depth + 1, key, out, out_type);
    default:
      return fail(fmt::format("key '{}': unknown value type {}", key,
                              static_cast<uint32_t>(type)));
  }
  if (!st) return truncated(fmt::format("value of key '{}'", key));
  return Status::ok();
}

// Smallest encoded size of one element of an array of `type` (to reject absurd counts
// before allocating anything).
size_t min_element_bytes(GgufType type) {
  switch (type) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::STRING: case GgufType::UINT64: case GgufType::INT64:
    case GgufType::FLOAT64: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

template <typename T>
void read_numbers(ByteReader& r, uint64_t n, nlohmann::json::array_t* arr) {
  for (uint64_t i = 0; i < n; ++i) {
    T v{};
    r.read(&v);  // bounds were checked for the whole array
    arr->emplace_back(v);
  }
}

Status GgufParser::read_array(int depth, const std::string& key, nlohmann::json* out,
                              GgufValueType* out_type) {
  if (depth > kMaxArrayDepth) {
    return fail(fmt::format("key '{}': arrays nested deeper than {}", key, kMaxArrayDepth));
  }
  uint32_t raw_type = 0;
  uint64_t n = 0;
  if (!r_.read(&raw_type) || !r_.read(&n)) {
    return truncated(fmt::format("array header of key '{}'", key));
  }
  if (raw_type > static_cast<uint32_t>(GgufType::FLOAT64)) {
    return fail(fmt::format("key '{}': unknown array element type {}", key, raw_type));
  }
  const auto type = static_cast<GgufType>(raw_type);
  out_type->elem = type;
  if (n > r_.remaining() / min_element_bytes(type)) {
    return fail(fmt::format("key '{}': array of {} elements at offset {} exceeds file size {}",
                            key, n, r_.pos(), size_));
  }
  *out = nlohmann::json::array();
  auto& arr = out->get_ref<nlohmann::json::array_t&>();
  arr.reserve(static_cast<size_t>(n));
  switch (type) {  // fast paths for the big ones (token lists, scores, types)
    case GgufType::INT32: read_numbers<int32_t>(r_, n, &arr); return Status::ok();
    case GgufType::FLOAT32: read_numbers<float>(r_, n, &arr); return Status::ok();
    case GgufType::UINT32: read_numbers<uint32_t>(r_, n, &arr); return Status::ok();
    case GgufType::STRING:
      for (uint64_t i = 0; i < n; ++i) {
        std::string_view s;
        EMBER_RETURN_IF_ERROR(read_string(&s, fmt::format("key '{}' element {}", key, i)));
        arr.emplace_back(std::string(s));
      }
      return Status::ok();
    default:
      for (uint64_t i = 0; i < n; ++i) {
        nlohmann::json v;
        GgufValueType vt;
        EMBER_RETURN_IF_ERROR(read_value(type, depth, key, &v, &vt));
        arr.push_back(std::move(v));
        if (type == GgufType::ARRAY) out_type->items.push_back(std::move(vt));
      }
      return Status::ok();
  }
}

Status GgufParser::read_metadata(uint64_t n_kv, GgufFile* f) {
  f->metadata = nlohmann::json::object();
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string_view key_view;
    EMBER_RETURN_IF_ERROR(read_string(&key_view, fmt::format("metadata key {}", i)));
    std::string key(key_view);
    uint32_t type = 0;
    if (!r_.read(&type)) return truncated(fmt::format("type of key '{}'", key));
    if (f->metadata.contains(key)) return fail(fmt::format("duplicate metadata key '{}'", key));
    nlohmann::json value;
    GgufValueType value_type;
    EMBER_RETURN_IF_ERROR(read_value(static_cast<GgufType>(type), 0, key, &value, &value_type));
    f->metadata_keys.push_back(key);
    f->metadata_types.emplace(key, std::move(value_type));
    f->metadata.emplace(std::move(key), std::move(value));
  }
  return Status::ok();
}

Status GgufParser::read_tensor_info(GgufTensorInfo* t) {
  std::string_view name;
  EMBER_RETURN_IF_ERROR(read_string(&name, "tensor name"));
  t->name = std::string(name);
  const std::string where = fmt::format("tensor '{}'", t->name);
  uint32_t n_dims = 0;
  if (!r_.read(&n_dims)) return truncated(where + " n_dims");
  if (n_dims < 1 || n_dims > 4) return fail(fmt::format("{}: n_dims {} not in 1..4", where, n_dims));
  t->n_dims = static_cast<int>(n_dims);
  int64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = 0;
    if (!r_.read(&ne)) return truncated(where + " dims");
    if (ne == 0 || ne > static_cast<uint64_t>(INT64_MAX)) {
      return fail(fmt::format("{}: dimension {} is {}", where, d, ne));
    }
    t->ne[d] = static_cast<int64_t>(ne);
    if (__builtin_mul_overflow(numel, t->ne[d], &numel)) {
      return fail(fmt::format("{}: element count overflows", where));
    }
  }
  uint32_t type_id = 0;
  uint64_t offset = 0;
  if (!r_.read(&type_id)) return truncated(where + " type");
  if (!r_.read(&offset)) return truncated(where + " offset");
  const auto dtype = dtype_from_ggml_id(static_cast<int32_t>(type_id));
  if (type_id > 999 || !dtype) {
    return fail(fmt::format("{}: unsupported tensor type id {}", where, type_id));
  }
  t->dtype = *dtype;
  const auto traits = *dtype_traits(*dtype);
  if (t->ne[0] % traits.block_size != 0) {
    return fail(fmt::format("{}: row of {} elements is not a multiple of {}'s block size {}",
                            where, t->ne[0], traits.name, traits.block_size));
  }
  const uint64_t n_blocks = static_cast<uint64_t>(numel / traits.block_size);
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(n_blocks, traits.block_bytes, &nbytes) || nbytes > SIZE_MAX) {
    return fail(fmt::format("{}: byte size overflows", where));
  }
  t->nbytes = static_cast<size_t>(nbytes);
  t->file_offset = static_cast<size_t>(offset);  // relative for now; place_tensors rebases
  return Status::ok();
}

Status GgufParser::apply_alignment(GgufFile* f) {
  auto it = f->metadata.find("general.alignment");
  if (it == f->metadata.end()) return Status::ok();
  if (!it->is_number_unsigned()) {
    return fail("general.alignment is not an unsigned integer");
  }
  const uint64_t a = it->get<uint64_t>();
  // The spec asks for a multiple of 8; a power of two keeps align-up cheap and exact.
  if (a < 8 || (a & (a - 1)) != 0 || a > (1u << 30)) {
    return fail(fmt::format("general.alignment {} is not a power of two in [8, 2^30]", a));
  }
  f->alignment = a;
  return Status::ok();
}

Status GgufParser::place_tensors(GgufFile* f) {
  const size_t end_of_infos = r_.pos();
  f->data_offset = (end_of_infos + (f->alignment - 1)) / f->alignment * f->alignment;
  for (auto& t : f->tensors) {
    const uint64_t rel = t.file_offset;
    const std::string where = fmt::format("tensor '{}'", t.name);
    if (rel % f->alignment != 0) {
      return fail(fmt::format("{}: offset {} is not a multiple of the alignment {}", where, rel,
                              f->alignment));
    }
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(static_cast<uint64_t>(f->data_offset), rel, &begin) ||
        __builtin_add_overflow(begin, static_cast<uint64_t>(t.nbytes), &end)) {
      return fail(fmt::format("{}: data offset {} + {} bytes overflows", where, rel, t.nbytes));
    }
    if (end > size_) {
      return fail(fmt::format("{}: data [{}, {}) exceeds file size {}", where, begin, end, size_));
    }
    t.file_offset = static_cast<size_t>(begin);
  }
  return Status::ok();
}

Result<GgufFile> GgufParser::parse() {
  GgufFile f;
  char magic[4];
  if (!r_.read(&magic)) return truncated("magic");
  if (std::string_view(magic, 4) != "GGUF") return fail("not a GGUF file (bad magic)");
  uint64_t n_tensors = 0, n_kv = 0;
  if (!r_.read(&f.version)) return truncated("version");
  if (f.version == 1) return fail("GGUF version 1 is not supported (v2 and v3 are)");
  if (f.version != 2 && f.version != 3) {
    if ((f.version & 0xffff) == 0) return fail("big-endian GGUF files are not supported");
    return fail(fmt::format("unsupported GGUF version {}", f.version));
  }
  if (!r_.read(&n_tensors)) return truncated("tensor count");
  if (!r_.read(&n_kv)) return truncated("metadata count");
  // Each tensor info takes at least 8+4+8+4+8 bytes and each key-value at least 8+4+1.
  if (n_tensors > r_.remaining() / 32) {
    return fail(fmt::format("tensor count {} impossible for file size {}", n_tensors, size_));
  }
  if (n_kv > r_.remaining() / 13) {
    return fail(fmt::format("metadata count {} impossible for file size {}", n_kv, size_));
  }
  EMBER_RETURN_IF_ERROR(read_metadata(n_kv, &f));
  EMBER_RETURN_IF_ERROR(apply_alignment(&f));
  f.tensors.resize(static_cast<size_t>(n_tensors));
  std::set<std::string_view> names;
  for (auto& t : f.tensors) {
    EMBER_RETURN_IF_ERROR(read_tensor_info(&t));
    if (!names.insert(t.name).second) return fail(fmt::format("duplicate tensor '{}'", t.name));
  }
  EMBER_RETURN_IF_ERROR(place_tensors(&f));
  return f;
}

}  // namespace

Result<GgufFile> parse_gguf(const uint8_t* data, size_t size, const std::string& name) {
  return GgufParser(data, size, name).parse();
}

}  // namespace ember::loader
