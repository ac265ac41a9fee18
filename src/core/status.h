#pragma once
// Status / Result<T>: how errors that input can cause cross module boundaries.
#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ember {

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }
  template <typename... Args>
  static Status errorf(fmt::format_string<Args...> f, Args&&... args) {
    return Status(fmt::format(f, std::forward<Args>(args)...));
  }
  bool is_ok() const { return !message_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const {
    static const std::string empty;
    return message_ ? *message_ : empty;
  }
  // Prefixes context ("loading foo.gguf: ") to an error; no-op on success.
  Status with_context(const std::string& context) const {
    return is_ok() ? *this : Status(context + ": " + *message_);
  }

 private:
  explicit Status(std::string m) : message_(std::move(m)) {}
  std::optional<std::string> message_;
};

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}                  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}           // NOLINT: must be an error
  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return std::get<0>(v_); }
  Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }
  const std::string& message() const { return std::get<1>(v_).message(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ember

// Propagate an error Status from an expression returning Status.
#define EMBER_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::ember::Status _st = (expr);              \
    if (!_st.is_ok()) return _st;              \
  } while (0)

#define EMBER_CONCAT_INNER(a, b) a##b
#define EMBER_CONCAT(a, b) EMBER_CONCAT_INNER(a, b)
// Assign the value of a Result<T> expression or return its error.
#define EMBER_ASSIGN_OR_RETURN(lhs, expr)                              \
  auto EMBER_CONCAT(_res_, __LINE__) = (expr);                         \
  if (!EMBER_CONCAT(_res_, __LINE__).is_ok())                          \
    return EMBER_CONCAT(_res_, __LINE__).status();                     \
  lhs = std::move(EMBER_CONCAT(_res_, __LINE__)).value()
