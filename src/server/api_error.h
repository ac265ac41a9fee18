#pragma once
// ApiError: what the server answers a request it cannot serve, as OpenAI's error object
// {"error": {"message", "type", "param", "code"}} with an HTTP status. ApiResult<T> carries either
// a value or an ApiError across the server's parsing and preparation steps (Result<T> has no
// room for the status and the offending parameter that clients rely on).
#include <fmt/format.h>

#include <string>
#include <utility>
#include <variant>

namespace ember::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // offending request field, "" for none
  std::string code;   // machine-readable code, "" for none
  int retry_after_s = 0;  // > 0: sent as Retry-After

  static ApiError bad_request(std::string message, std::string param = {}) {
    ApiError e;
    e.message = std::move(message);
    e.param = std::move(param);
    return e;
  }
  static ApiError not_found(std::string message, std::string code = {}) {
    ApiError e;
    e.status = 404;
    e.message = std::move(message);
    e.code = std::move(code);
    return e;
  }
  static ApiError unauthorized(std::string message) {
    ApiError e;
    e.status = 401;
    e.message = std::move(message);
    e.code = "invalid_api_key";
    return e;
  }
  static ApiError unavailable(std::string message, int retry_after_s = 0) {
    ApiError e;
    e.status = 503;
    e.type = "service_unavailable_error";
    e.message = std::move(message);
    e.retry_after_s = retry_after_s;
    return e;
  }
  // A request aborted by --request-timeout.
  static ApiError request_timeout(double timeout_s) {
    ApiError e;
    e.status = 408;
    e.type = "timeout_error";
    e.code = "request_timeout";
    e.message = fmt::format("the request did not finish within {} s (--request-timeout) and was aborted", timeout_s);
    return e;
  }
  static ApiError internal(std::string message) {
    ApiError e;
    e.status = 500;
    e.type = "internal_server_error";
    e.message = std::move(message);
    return e;
  }
};

template <typename T>
class ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}     // NOLINT: implicit by design
  ApiResult(ApiError error) : v_(std::move(error)) {}  // NOLINT
  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return std::get<0>(v_); }
  const ApiError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace ember::server
