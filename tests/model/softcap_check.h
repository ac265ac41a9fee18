#pragma once
// Final logit soft-capping (Gemma 2's final_logit_softcapping) on a real runner: the gemma3
// fixture with the field set must give cap * tanh(x / cap) of the same runner kind's plain
// logits (applied once, on the backend, where every path reads the logits), and the runner's
// greedy device pick must be the host argmax of those capped rows. The cap is half the largest
// plain logit, so it changes the logits (the check can fail). Shared by the CPU (tests/model)
// and CUDA tests.
#include "one_sequence_batch.h"
#include "runner/model_runner.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace ember::softcap_check {

// A copy of fixture dir `src` (weights linked) whose config.json sets final_logit_softcapping.
inline std::string capped_copy(const std::string& src, float cap, const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dst = fs::temp_directory_path() / ("ember-softcap-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "config.json") fs::create_symlink(fs::absolute(e.path()), dst / e.path().filename());
  std::ifstream in(fs::path(src) / "config.json");
  auto j = nlohmann::json::parse(in);
  j["final_logit_softcapping"] = cap;
  std::ofstream(dst / "config.json") << j.dump(2);
  return dst.string();
}

// opts: the runner kind under test (CPU or CUDA). tol: relative error of the capped logits
// against cap * tanh(plain / cap) computed on the host (the two runners run the same kernels).
inline void run(const std::string& fixture, const RunnerOptions& opts, double tol, const std::string& tag) {
  const std::vector<int32_t> table = {3, 1, 2, 0};
  std::vector<int32_t> prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back((i * 53 + 7) % 200);
  const ForwardBatch batch = one_sequence_batch(table, 16, 0, prompt, true);

  auto plain = ModelRunner::load(fixture, opts);
  ASSERT_TRUE(plain.is_ok()) << plain.message();
  ASSERT_TRUE((*plain)->allocate_kv_cache({4, 16}).is_ok());
  std::vector<float> lp;
  ASSERT_TRUE((*plain)->execute(batch, lp).is_ok());
  float mx = 0.0f;
  for (float v : lp) mx = std::max(mx, std::fabs(v));
  ASSERT_GT(mx, 0.0f);
  const float cap = mx / 2;

  const std::string dir = capped_copy(fixture, cap, tag);
  auto capped = ModelRunner::load(dir, opts);
  ASSERT_TRUE(capped.is_ok()) << capped.message();
  EXPECT_EQ((*capped)->config().final_logit_softcap, cap);
  ASSERT_TRUE((*capped)->allocate_kv_cache({4, 16}).is_ok());
  std::vector<float> lc;
  ASSERT_TRUE((*capped)->execute(batch, lc).is_ok());
  ASSERT_EQ(lc.size(), lp.size());
  double num = 0, den = 0, moved = 0;
  for (size_t i = 0; i < lp.size(); ++i) {
    const double ref = cap * std::tanh(double(lp[i]) / cap);
    num += (lc[i] - ref) * (lc[i] - ref);
    den += ref * ref;
    moved = std::max(moved, std::fabs(double(lp[i]) - lc[i]));
    ASSERT_LE(std::fabs(lc[i]), cap * (1 + 1e-6)) << i;
  }
  EXPECT_LT(std::sqrt(num / den), tol);
  EXPECT_GT(moved, 0.1 * cap) << "the cap changed nothing: the check would not see a missing cap";

  // Greedy steps pick on the device (no host soft-capping any more): the argmax of the capped rows.
  ASSERT_TRUE((*capped)->can_execute_argmax());
  std::vector<int32_t> ids;
  ASSERT_TRUE((*capped)->execute_argmax(batch, ids).is_ok());
  const int vocab = (*capped)->vocab_size();
  ASSERT_EQ(ids.size(), prompt.size());
  for (size_t r = 0; r < ids.size(); ++r) {
    const float* row = lc.data() + r * vocab;
    const float best = *std::max_element(row, row + vocab);
    EXPECT_EQ(row[ids[r]], best) << "row " << r;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace ember::softcap_check
