#include "core/step_profile.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace ember::step_profile {

namespace {

struct Phase {
  std::string name;
  double ms = 0;
  int64_t count = 0;
};

struct Kind {
  int64_t steps = 0, seqs = 0, tokens = 0;
  std::vector<Phase> phases;  // in first-seen order
};

struct State {
  std::mutex mu;
  Kind kinds[2];  // 0 decode, 1 prefill
  int current = 1;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* e = std::getenv("EMBER_STEP_PROFILE");
    return e != nullptr && std::strcmp(e, "0") != 0 && *e != '\0';
  }();
  return on;
}

void begin_step(bool decode_only, int n_seqs, int n_tokens) {
  if (!enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.current = decode_only ? 0 : 1;
  Kind& k = s.kinds[s.current];
  ++k.steps;
  k.seqs += n_seqs;
  k.tokens += n_tokens;
}

void add(const char* phase, double ms) {
  if (!enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Kind& k = s.kinds[s.current];
  for (Phase& p : k.phases) {
    if (p.name == phase) {
      p.ms += ms;
      ++p.count;
      return;
    }
  }
  k.phases.push_back({phase, ms, 1});
}

std::string report() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::string out;
  const char* names[2] = {"decode", "prefill"};
  for (int i = 0; i < 2; ++i) {
    const Kind& k = s.kinds[i];
    if (k.steps == 0) continue;
    out += fmt::format("step profile, {} steps: {} (mean {:.1f} sequences, {:.1f} tokens per step)\n", names[i],
                       k.steps, static_cast<double>(k.seqs) / k.steps, static_cast<double>(k.tokens) / k.steps);
    out += fmt::format("  {:<22} {:>12} {:>14} {:>8}\n", "phase", "total ms", "ms per step", "calls");
    for (const Phase& p : k.phases)
      out += fmt::format("  {:<22} {:>12.1f} {:>14.3f} {:>8}\n", p.name, p.ms, p.ms / k.steps, p.count);
  }
  return out;
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.kinds[0] = Kind{};
  s.kinds[1] = Kind{};
}

}  // namespace ember::step_profile
