#pragma once
// FieldReader: typed access to the optional fields of one JSON request object, with OpenAI's
// conventions: a missing field and an explicit null both mean "use the default", a value of the
// wrong type or out of range is an error naming the field. The first error is kept; callers read
// every field they need and check error() once.
#include "server/api_error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace ember::server {

using Json = nlohmann::ordered_json;

class FieldReader {
 public:
  // obj must outlive the reader. A non-object obj is itself the error.
  explicit FieldReader(const Json& obj, std::string what = "request body");

  // The value of key, or nullptr when missing or null.
  const Json* get(const char* key) const;
  bool has(const char* key) const { return get(key) != nullptr; }

  std::optional<bool> boolean(const char* key);
  std::optional<std::string> string(const char* key);
  // Integers in [lo, hi]; integral floats (2.0) are accepted, as OpenAI's own validation does.
  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi);
  // Finite numbers in [lo, hi]; lo_open makes the lower bound exclusive.
  std::optional<double> number(const char* key, double lo, double hi, bool lo_open = false);

  // Records an error (if none yet) for a field the caller validated itself.
  void fail(std::string message, std::string param);
  bool ok() const { return !error_.has_value(); }
  const std::optional<ApiError>& error() const { return error_; }

 private:
  const Json& obj_;
  std::optional<ApiError> error_;
};

// Shared helpers for values already extracted from JSON.
// An integer token id in [0, vocab_size) (no vocabulary bound when vocab_size <= 0).
bool json_token_id(const Json& v, int vocab_size, int32_t& out);
// JSON type names as OpenAI's messages use them ("string", "integer", "object", ...).
const char* json_type_name(const Json& v);

}  // namespace ember::server
