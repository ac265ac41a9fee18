// libFuzzer target: parse_safetensors on arbitrary bytes; on success every tensor's bytes
// must be readable inside the buffer (ASan flags any overrun).
#include "loader/safetensors_parser.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = ember::loader::parse_safetensors(data, size, "fuzz.safetensors");
  if (!f.is_ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& t : f->tensors) {
    const uint8_t* p = data + t.file_offset;
    for (size_t i = 0; i < t.nbytes; ++i) sink = static_cast<uint8_t>(sink + p[i]);
  }
  return 0;
}
