#pragma once
// EMBER_CHECK: invariants (programming errors), never input validation.
// Input problems return Status; a failed check is a bug, so it aborts with file:line.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace ember::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const std::string& msg) {
  std::fprintf(stderr, "ember: check failed at %s:%d: %s %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace ember::detail

#define EMBER_CHECK(cond, ...)                                                        \
  do {                                                                                \
    if (!(cond)) [[unlikely]]                                                         \
      ::ember::detail::check_failed(__FILE__, __LINE__, #cond,                        \
                                    ::fmt::format("" __VA_ARGS__));                   \
  } while (0)
