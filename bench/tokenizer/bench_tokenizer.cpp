// Encoding throughput of ember's tokenizer on one thread: MB/s of UTF-8 input and tokens/s.
//   bench_tokenizer MODEL TEXT_FILE [--iters N] [--ids OUT]
// MODEL is a Hugging Face directory (tokenizer.json) or a GGUF file. The text is encoded as one
// string (no special tokens added), N times after one warm-up pass (which also fills the word
// cache, as a long-running server's would be). bench/tokenizer/compare.py runs this next to HF.
#include "loader/weight_source.h"
#include "tokenizer/tokenizer.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL TEXT_FILE [--iters N] [--ids OUT]\n", argv[0]);
    return 2;
  }
  std::string model = argv[1], text_path = argv[2], ids_out;
  int iters = 5;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--ids") == 0) ids_out = argv[i + 1];
  }
  auto t0 = Clock::now();
  ember::Result<std::unique_ptr<ember::Tokenizer>> tok = ember::Status::error("unset");
  if (model.size() > 5 && model.substr(model.size() - 5) == ".gguf") {
    auto ws = ember::WeightSource::open(model);
    if (!ws) {
      std::fprintf(stderr, "%s\n", ws.message().c_str());
      return 1;
    }
    tok = ember::Tokenizer::from_gguf_metadata((*ws)->metadata());
  } else {
    tok = ember::Tokenizer::from_hf_dir(model);
  }
  if (!tok) {
    std::fprintf(stderr, "%s\n", tok.message().c_str());
    return 1;
  }
  double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::ifstream f(text_path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();

  auto cold0 = Clock::now();
  std::vector<int32_t> ids = (*tok)->encode(text, false);
  double cold_s = std::chrono::duration<double>(Clock::now() - cold0).count();
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    auto a = Clock::now();
    ids = (*tok)->encode(text, false);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - a).count());
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("load_s=%.3f bytes=%zu tokens=%zu cold_mb_s=%.2f mb_s=%.2f tokens_s=%.0f\n", load_s, text.size(),
              ids.size(), mb / cold_s, mb / best, static_cast<double>(ids.size()) / best);
  if (!ids_out.empty()) {
    std::ofstream o(ids_out);
    for (int32_t id : ids) o << id << '\n';
  }
  return 0;
}
