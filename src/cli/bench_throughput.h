#pragma once
// `ember bench throughput`: offline serving benchmark through LlmEngine.
#include "cli/common.h"

#include <CLI/CLI.hpp>

#include <string>

namespace ember {

struct ThroughputOptions {
  ModelOptions model;
  int num_requests = 64;
  int concurrency = 16;
  int input_len = 128;
  int output_len = 64;
  double len_spread = 0.0;     // lengths uniform in [L(1-F), L(1+F)]
  int shared_prefix_len = 0;   // tokens of a common prefix at the start of every prompt
  uint64_t seed = 1;
  float temperature = 0.0f;  // of every request; seeded per request from `seed`
  float top_p = 1.0f;
  std::string json_path;
};

void add_throughput_options(CLI::App& cmd, ThroughputOptions& o);
int run_throughput(const ThroughputOptions& o);

}  // namespace ember
