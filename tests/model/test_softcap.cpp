// Final logit soft-capping on the CPU runner (softcap_check.h).
#include "softcap_check.h"

namespace ember {
namespace {

TEST(FinalSoftcap, AppliedOnceToTheLogitsOnTheBackend) {
  RunnerOptions o;
  o.n_threads = 2;
  softcap_check::run(EMBER_FIXTURES_DIR "/models/gemma3/hf", o, 1e-6, "cpu");
}

}  // namespace
}  // namespace ember
