#include "server/auth.h"

#include <cctype>

namespace ember::server {

namespace {

bool equal_constant_time(std::string_view a, std::string_view b) {
  // Length differences leak only the length; every byte of the longer string is still read.
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

bool bearer_token_matches(std::string_view header, std::string_view key) {
  constexpr std::string_view kScheme = "bearer";
  if (key.empty() || header.size() <= kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i)  // the scheme is case-insensitive (RFC 7235)
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return false;
  std::string_view rest = header.substr(kScheme.size());
  if (rest.empty() || (rest.front() != ' ' && rest.front() != '\t')) return false;
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t')) rest.remove_suffix(1);
  return equal_constant_time(rest, key);
}

}  // namespace ember::server
