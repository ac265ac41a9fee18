#include "server/json_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace ember::server {

namespace {

// Integral value of a JSON number, or nullopt when it has a fraction or does not fit int64.
std::optional<int64_t> as_integer(const Json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 is exactly representable; anything at or beyond it does not fit.
    if (!std::isfinite(d) || std::trunc(d) != d || d < -9.2233720368547758e18 || d >= 9.2233720368547758e18)
      return std::nullopt;
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

}  // namespace

const char* json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "array";
    case Json::value_t::object: return "object";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer";
    case Json::value_t::number_float: return "number";
    default: return "value";
  }
}

bool json_token_id(const Json& v, int vocab_size, int32_t& out) {
  if (!v.is_number()) return false;
  auto i = as_integer(v);
  if (!i || *i < 0 || *i > INT32_MAX || (vocab_size > 0 && *i >= vocab_size)) return false;
  out = static_cast<int32_t>(*i);
  return true;
}

FieldReader::FieldReader(const Json& obj, std::string what) : obj_(obj) {
  if (!obj_.is_object()) fail(fmt::format("{} must be a JSON object, got {}", what, json_type_name(obj_)), "");
}

const Json* FieldReader::get(const char* key) const {
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

void FieldReader::fail(std::string message, std::string param) {
  if (!error_) error_ = ApiError::bad_request(std::move(message), std::move(param));
}

std::optional<bool> FieldReader::boolean(const char* key) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    fail(fmt::format("'{}' must be a boolean, got {}", key, json_type_name(*v)), key);
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::string> FieldReader::string(const char* key) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    fail(fmt::format("'{}' must be a string, got {}", key, json_type_name(*v)), key);
    return std::nullopt;
  }
  return v->get<std::string>();
}

std::optional<int64_t> FieldReader::integer(const char* key, int64_t lo, int64_t hi) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) {
    fail(fmt::format("'{}' must be an integer, got {}", key, json_type_name(*v)), key);
    return std::nullopt;
  }
  auto i = as_integer(*v);
  if (!i) {
    fail(fmt::format("'{}' must be an integer, got {}", key, v->dump()), key);
    return std::nullopt;
  }
  if (*i < lo || *i > hi) {
    if (hi == std::numeric_limits<int64_t>::max())
      fail(fmt::format("'{}' must be >= {}, got {}", key, lo, *i), key);
    else
      fail(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, *i), key);
    return std::nullopt;
  }
  return *i;
}

std::optional<double> FieldReader::number(const char* key, double lo, double hi, bool lo_open) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) {
    fail(fmt::format("'{}' must be a number, got {}", key, json_type_name(*v)), key);
    return std::nullopt;
  }
  const double d = v->get<double>();
  const bool low_ok = lo_open ? d > lo : d >= lo;
  if (!std::isfinite(d) || !low_ok || d > hi) {
    fail(fmt::format("'{}' must be in {}{}, {}], got {}", key, lo_open ? "(" : "[", lo, hi, v->dump()), key);
    return std::nullopt;
  }
  return d;
}

}  // namespace ember::server
