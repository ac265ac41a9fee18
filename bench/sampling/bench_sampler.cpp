// Host sampling of one engine step: `bench_sampler [rows] [vocab] [threads...]` samples
// rows x vocab logits (a Llama-3 vocabulary by default) with greedy, temperature, top-p and
// top-k parameters on 1..N threads and prints ms per step, median of 5, with a progress line
// per case. This is the work of a GPU step whose requests need full logits (docs/CUDA_NOTES.md).
#include "sample/sampler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace ember;
  const int rows = argc > 1 ? std::atoi(argv[1]) : 256;
  const int vocab = argc > 2 ? std::atoi(argv[2]) : 128256;
  std::vector<int> threads;
  for (int i = 3; i < argc; ++i) threads.push_back(std::atoi(argv[i]));
  if (threads.empty()) threads = {1, 2};
  std::mt19937 gen(1);
  // Peaked like a trained model's distribution (a few likely tokens, a long tail), not flat.
  std::normal_distribution<float> nd(0.0f, 2.5f);
  std::vector<float> logits(static_cast<size_t>(rows) * static_cast<size_t>(vocab));
  for (auto& v : logits) v = nd(gen);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < 8; ++j) logits[static_cast<size_t>(r) * vocab + static_cast<size_t>(gen() % vocab)] += 12.0f;
  struct Case {
    const char* name;
    SamplingParams p;
  };
  std::vector<Case> cases(4);
  cases[0] = {"greedy", {}};
  cases[0].p.temperature = 0.0f;
  cases[1] = {"temperature 0.8", {}};
  cases[1].p.temperature = 0.8f;
  cases[2] = {"temperature 0.8, top_p 0.9", {}};
  cases[2].p.temperature = 0.8f;
  cases[2].p.top_p = 0.9f;
  cases[3] = {"temperature 0.8, top_k 50", {}};
  cases[3].p.temperature = 0.8f;
  cases[3].p.top_k = 50;
  std::printf("rows %d, vocab %d\n", rows, vocab);
  for (const Case& c : cases) {
    for (int t : threads) {
      Sampler s({}, t);
      std::vector<std::mt19937_64> rngs;
      for (int r = 0; r < rows; ++r) rngs.emplace_back(static_cast<uint64_t>(r));
      std::vector<SamplerRow> rs;
      for (int r = 0; r < rows; ++r) rs.push_back({r, &c.p, {}, {}, &rngs[static_cast<size_t>(r)]});
      std::vector<double> ms;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto out = s.sample(logits, vocab, rs);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        if (out.size() != static_cast<size_t>(rows)) return 1;
      }
      std::sort(ms.begin(), ms.end());
      std::printf("%-28s threads %2d: %8.2f ms per step\n", c.name, t, ms[2]);
      std::fflush(stdout);
    }
  }
  return 0;
}
