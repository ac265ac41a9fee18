#include "core/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

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
  // The header is a Python dict literal; read the three keys we need by hand.
  const size_t descr = header.find("'descr'");
  const size_t q1 = descr == std::string::npos ? descr : header.find('\'', descr + 7);
  const size_t q2 = q1 == std::string::npos ? q1 : header.find('\'', q1 + 1);
  if (q2 == std::string::npos) return Status::errorf("{}: no dtype in header {}", path, header);
  std::string type = header.substr(q1 + 1, q2 - q1 - 1);
  if (!type.empty() && (type[0] == '<' || type[0] == '|')) type.erase(0, 1);
  if (type.size() != 2 || (type[0] != 'f' && type[0] != 'i') || (type[1] != '4' && type[1] != '8'))
    return Status::errorf("{}: unsupported dtype '{}'", path, type);
  const char kind = type[0];
  const int width = type[1] - '0';
  if (header.find("'fortran_order': True") != std::string::npos)
    return Status::errorf("{}: fortran order not supported", path);
  NpyArray arr;
  const size_t sh = header.find("'shape'");
  const size_t open = sh == std::string::npos ? sh : header.find('(', sh);
  const size_t close = open == std::string::npos ? open : header.find(')', open);
  if (close == std::string::npos) return Status::errorf("{}: no shape in header", path);
  int64_t cur = -1;
  for (size_t i = open + 1; i <= close; ++i) {
    const char c = header[i];
    if (c >= '0' && c <= '9') {
      cur = (cur < 0 ? 0 : cur * 10) + (c - '0');
      if (cur > (int64_t{1} << 40)) return Status::errorf("{}: absurd shape", path);
    } else if (cur >= 0) {
      arr.shape.push_back(cur);
      cur = -1;
    }
  }
  int64_t n = 1;
  for (auto s : arr.shape) {
    if (s != 0 && n > (int64_t{1} << 40) / s) return Status::errorf("{}: absurd shape", path);
    n *= s;
  }
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
