#pragma once
// GPT-2's byte <-> printable-character map used by byte-level BPE vocabularies: every byte gets
// a visible code point so that vocabularies can be stored as text ("Ġ" is the space byte).
#include <array>
#include <string>
#include <string_view>

namespace ember::tok {

class ByteLevelMap {
 public:
  static const ByteLevelMap& get();
  // UTF-8 of the code point standing for byte b.
  const std::string& encode_byte(unsigned char b) const { return byte_to_utf8_[b]; }
  char32_t code_point(unsigned char b) const { return byte_to_cp_[b]; }
  // The byte a code point stands for, or -1 when it stands for none.
  int decode_code_point(char32_t cp) const { return cp < cp_to_byte_.size() ? cp_to_byte_[cp] : -1; }
  // Maps every byte of s to its character.
  std::string encode(std::string_view s) const;
  // Inverse of encode; false when s has a character outside the map.
  bool decode(std::string_view s, std::string& out) const;

 private:
  ByteLevelMap();
  std::array<char32_t, 256> byte_to_cp_{};
  std::array<std::string, 256> byte_to_utf8_;
  std::array<int, 324> cp_to_byte_{};
};

}  // namespace ember::tok
