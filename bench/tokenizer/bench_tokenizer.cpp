// Encoding throughput of ember's tokenizer on one thread: MB/s of UTF-8 input and tokens/s, per
// second of the thread's CPU time (wall-clock MB/s is printed too).
//   bench_tokenizer MODEL TEXT_FILE [--iters N] [--ids OUT]
// MODEL is a Hugging Face directory (tokenizer.json) or a GGUF file. TEXT_FILE holds prompts
// separated by the byte 0x1E (a file without it is one prompt); each is encoded on its own (no
// special tokens added), the whole set N times after one cold pass (which also fills the word
// cache, as a long-running server's would be). bench/tokenizer/compare.py runs this next to HF.
#include "loader/weight_source.h"
#include "tokenizer/tokenizer.h"

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

using Clock = std::chrono::steady_clock;

// CPU time of this thread: the machines this runs on are shared, and wall time there measures
// the neighbours as much as the tokenizer.
static double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

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
  if (auto ws = ember::WeightSource::open(model); ws.is_ok()) {
    tok = ember::Tokenizer::from_weight_source(**ws);
  } else {
    tok = ember::Tokenizer::from_hf_dir(model);  // a tokenizer-only directory (no weights)
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
  std::vector<std::string_view> prompts;
  size_t total = 0;
  for (size_t pos = 0; pos <= text.size();) {
    size_t end = text.find('\x1e', pos);
    if (end == std::string::npos) end = text.size();
    prompts.push_back(std::string_view(text).substr(pos, end - pos));
    total += end - pos;
    pos = end + 1;
  }
  std::vector<int32_t> ids;
  auto encode_all = [&] {
    ids.clear();
    for (std::string_view p : prompts) {
      auto v = (*tok)->encode(p, false);
      ids.insert(ids.end(), v.begin(), v.end());
    }
  };
  double cold0 = thread_cpu_s();
  encode_all();
  double cold_s = thread_cpu_s() - cold0;
  double best = 1e30, best_wall = 1e30;
  for (int i = 0; i < iters; ++i) {
    auto a = Clock::now();
    double c = thread_cpu_s();
    encode_all();
    best = std::min(best, thread_cpu_s() - c);
    best_wall = std::min(best_wall, std::chrono::duration<double>(Clock::now() - a).count());
  }
  const double mb = static_cast<double>(total) / 1e6;
  std::printf("load_s=%.3f prompts=%zu bytes=%zu tokens=%zu cold_mb_s=%.2f mb_s=%.2f wall_mb_s=%.2f tokens_s=%.0f\n",
              load_s, prompts.size(), total, ids.size(), mb / cold_s, mb / best, mb / best_wall,
              static_cast<double>(ids.size()) / best);
  if (!ids_out.empty()) {
    std::ofstream o(ids_out);
    for (int32_t id : ids) o << id << '\n';
  }
  return 0;
}
