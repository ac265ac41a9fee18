#pragma once
// A progress bar on stderr for long work (model load, benchmarks, perplexity). On a terminal
// it redraws one line; otherwise it prints a line every 10%, so logs stay readable.
#include <chrono>
#include <cstdint>
#include <string>

namespace ember {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  void update(int64_t done, const std::string& suffix = "");
  // For work whose size is only known once it starts (the layer count of a model being loaded).
  void set_total(int64_t total) { total_ = total > 0 ? total : 1; }
  void finish(const std::string& summary = "");

 private:
  std::string label_;
  int64_t total_;
  bool tty_;
  int last_decile_ = -1;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ember
