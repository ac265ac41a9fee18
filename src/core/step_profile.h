#pragma once
// Step profile: wall-clock time of the phases of engine steps (schedule, forward, logits
// download, sampling, ...), on when EMBER_STEP_PROFILE=1 (read once). Phases add up per step
// kind: "decode" when every scheduled sequence runs one token, "prefill" otherwise (prompt
// chunks, alone or mixed with decodes). report() formats the table (the engine prints it to
// stderr when it is destroyed). Timers cost one clock read each when on, nothing when off.
#include <chrono>
#include <string>

namespace ember::step_profile {

bool enabled();
// Starts a step of the given kind: later add() calls count towards it.
void begin_step(bool decode_only, int n_seqs, int n_tokens);
void add(const char* phase, double ms);
std::string report();
void reset();

// Adds the time from construction to destruction to `phase` (when enabled).
class Scope {
 public:
  explicit Scope(const char* phase) : phase_(enabled() ? phase : nullptr) {
    if (phase_) t0_ = std::chrono::steady_clock::now();
  }
  ~Scope() { stop(); }
  void stop() {
    if (!phase_) return;
    add(phase_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count());
    phase_ = nullptr;
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* phase_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace ember::step_profile
