#pragma once
// Python str operations over UTF-8 text, shared by string methods and filters.
#include <cstdint>
#include <string>
#include <vector>

namespace ember::chat {

// str.strip / lstrip / rstrip; `chars` null means Python whitespace.
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
// str.split / str.rsplit; `sep` null means runs of whitespace.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
std::string py_replace(const std::string& s, const std::string& old, const std::string& replacement, int64_t count);
int64_t py_count(const std::string& s, const std::string& sub);
// str.center ('^'), str.ljust ('<'), str.rjust ('>').
std::string py_justify(const std::string& s, int64_t width, const std::string& fill, char how);
std::string py_zfill(const std::string& s, int64_t width);

}  // namespace ember::chat
