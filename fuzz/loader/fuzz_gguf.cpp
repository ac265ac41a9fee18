// libFuzzer target: parse_gguf on arbitrary bytes. A successful parse promises that every
// tensor lies inside the buffer, so read all of it (ASan flags any overrun) and dequantize
// its first row; also serialize the metadata, as `ember info` would.
#include "loader/gguf_parser.h"
#include "quant/quant.h"

#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = ember::loader::parse_gguf(data, size, "fuzz.gguf");
  if (!f.is_ok()) return 0;
  volatile uint8_t sink = 0;
  std::vector<float> row;
  for (const auto& t : f->tensors) {
    const uint8_t* p = data + t.file_offset;
    for (size_t i = 0; i < t.nbytes; ++i) sink = static_cast<uint8_t>(sink + p[i]);
    if (ember::quant::can_dequantize(t.dtype) && t.ne[0] <= (1 << 16)) {
      row.resize(static_cast<size_t>(t.ne[0]));
      ember::quant::dequantize_row(t.dtype, p, row.data(), t.ne[0]);
    }
  }
  (void)f->metadata.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
