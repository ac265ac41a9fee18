#include "core/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>

namespace ember {

Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t n = 1;
  for (int64_t s : shape) {
    dims += std::to_string(s) + ",";
    n *= s;
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::errorf("{}: cannot write", path);
  const uint16_t hlen = static_cast<uint16_t>(header.size());
  std::fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  std::fwrite(&hlen, 2, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  const size_t written = std::fwrite(data, sizeof(float), static_cast<size_t>(n), f);
  const bool ok = std::fclose(f) == 0 && written == static_cast<size_t>(n);
  return ok ? Status::ok() : Status::errorf("{}: write failed", path);
}

Result<NpyArray> read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::errorf("{}: cannot open", path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    return Status::errorf("{}: not a .npy file", path);
  size_t hlen, off;
  if (bytes[6] == 1) {
    hlen = static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
    off = 10;
  } else {
    if (bytes.size() < 12) return Status::errorf("{}: truncated header", path);
    uint32_t h;
    std::memcpy(&h, bytes.data() + 8, 4);
    hlen = h;
    off = 12;
  }
  if (off + hlen > bytes.size()) return Status::errorf("{}: truncated header", path);
  const std::string header = bytes.substr(off, hlen);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([<|]?)([fi])(\\d)'")))
    return Status::errorf("{}: unsupported dtype in header {}", path, header);
  const char kind = m[2].str()[0];
  const int width = std::stoi(m[3].str());
  if (header.find("'fortran_order': True") != std::string::npos)
    return Status::errorf("{}: fortran order not supported", path);
  NpyArray arr;
  if (std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)"))) {
    std::string s = m[1].str();
    std::regex num("\\d+");
    for (auto it = std::sregex_iterator(s.begin(), s.end(), num); it != std::sregex_iterator(); ++it)
      arr.shape.push_back(std::stoll(it->str()));
  }
  int64_t n = 1;
  for (auto s : arr.shape) n *= s;
  const char* p = bytes.data() + off + hlen;
  if (static_cast<size_t>(n) * static_cast<size_t>(width) > bytes.size() - off - hlen)
    return Status::errorf("{}: truncated data", path);
  arr.data.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const char* e = p + i * width;
    float v;
    if (kind == 'f' && width == 4) { std::memcpy(&v, e, 4); }
    else if (kind == 'f' && width == 8) { double d; std::memcpy(&d, e, 8); v = static_cast<float>(d); }
    else if (kind == 'i' && width == 4) { int32_t d; std::memcpy(&d, e, 4); v = static_cast<float>(d); }
    else if (kind == 'i' && width == 8) { int64_t d; std::memcpy(&d, e, 8); v = static_cast<float>(d); }
    else return Status::errorf("{}: unsupported dtype {}{}", path, kind, width);
    arr.data[static_cast<size_t>(i)] = v;
  }
  return arr;
}

}  // namespace ember
