#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

namespace ember {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)), total_(total > 0 ? total : 1), tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t done, const std::string& suffix) {
  const double frac = static_cast<double>(done) / static_cast<double>(total_);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::fprintf(stderr, "\r%s [%s] %3.0f%% %lld/%lld %.1fs %s", label_.c_str(), bar.c_str(), frac * 100,
                 static_cast<long long>(done), static_cast<long long>(total_), secs, suffix.c_str());
    std::fflush(stderr);
  } else {
    const int decile = static_cast<int>(frac * 10);
    if (decile != last_decile_) {
      last_decile_ = decile;
      std::fprintf(stderr, "%s: %3.0f%% (%lld/%lld) %.1fs %s\n", label_.c_str(), frac * 100,
                   static_cast<long long>(done), static_cast<long long>(total_), secs, suffix.c_str());
    }
  }
}

void ProgressBar::finish(const std::string& summary) {
  if (finished_) return;
  finished_ = true;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s: done in %.2fs %s\n", label_.c_str(), secs, summary.c_str());
}

}  // namespace ember
