#include "tokenizer/byte_level.h"

#include "core/utf8.h"

namespace ember::tok {

const ByteLevelMap& ByteLevelMap::get() {
  static const ByteLevelMap map;  // immutable after construction
  return map;
}

ByteLevelMap::ByteLevelMap() {
  cp_to_byte_.fill(-1);
  // Printable Latin-1 bytes stand for themselves; the rest are shifted to 256 + n in byte order.
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
    byte_to_cp_[b] = cp;
    append_utf8(byte_to_utf8_[b], cp);
    cp_to_byte_[cp] = b;
  }
}

std::string ByteLevelMap::encode(std::string_view s) const {
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) out += byte_to_utf8_[static_cast<unsigned char>(c)];
  return out;
}

bool ByteLevelMap::decode(std::string_view s, std::string& out) const {
  size_t pos = 0;
  while (pos < s.size()) {
    int b = decode_code_point(next_code_point(s, pos));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace ember::tok
