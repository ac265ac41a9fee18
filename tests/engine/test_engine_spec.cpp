// Speculative decoding in the engine: whatever the drafts (all right, all wrong, mixed, cut by
// stops, max_tokens, the budget or block boundaries), the output equals decoding without them,
// greedy and seeded sampling alike, with the KV bookkeeping consistent after every step (the
// fake executor reads every token back through the block tables, so K/V of a rejected draft
// read as a real token would change its logits).
#include "engine_test_util.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <random>
#include <span>

namespace ember::testing {
namespace {

constexpr int kVocab = 64;

// The fake's greedy continuation of `tokens` (what a perfect drafter would propose).
std::vector<int32_t> greedy_continuation(std::span<const int32_t> tokens, int k) {
  return reference_greedy({tokens.begin(), tokens.end()}, k, {}, kVocab, 1 << 20, /*ignore_eos=*/true);
}

using Proposer = std::function<std::vector<int32_t>(std::span<const int32_t>)>;

struct SpecRun {
  Results results;
  EngineStats stats;
  int argmax_steps = 0;  // steps the executor picked by argmax (execute_argmax)
};

SpecRun run(const std::vector<EngineRequest>& requests, int drafts, Proposer proposer, int budget = 64,
            bool device_argmax = false, bool adaptive = true) {
  EngineSetup s = default_setup();
  s.config.spec.adaptive = adaptive;
  s.fake.device_argmax = device_argmax;
  s.config.scheduler.max_num_batched_tokens = budget;
  s.config.spec.num_tokens = drafts;
  s.config.propose_drafts = std::move(proposer);
  TestEngine te = make_engine(s);
  for (const EngineRequest& r : requests) EXPECT_TRUE(te.engine->add_request(r).is_ok());
  SpecRun out;
  run_all(te, out.results);
  out.stats = te.engine->stats();
  out.argmax_steps = te.fake->n_argmax_steps();
  EXPECT_EQ(out.stats.kv_blocks_used, 0);
  return out;
}

std::vector<EngineRequest> greedy_requests() {
  std::vector<EngineRequest> rs;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(3 + i * 2));
    for (auto& t : prompt) t = 1 + static_cast<int32_t>(rng() % (kVocab - 1));
    rs.push_back(greedy_request(fmt::format("g{}", i), prompt, 9 + 4 * i));
  }
  return rs;
}

void expect_greedy_reference(const Results& res, const std::vector<EngineRequest>& rs) {
  for (const EngineRequest& r : rs) {
    const SampleResult& got = res.at(r.request_id).at(0);
    EXPECT_TRUE(got.finished);
    EXPECT_EQ(got.tokens, reference_greedy(r.prompt_token_ids, *r.params.max_tokens, {0}, kVocab, 256)) << r.request_id;
  }
}

TEST(LlmEngineSpec, GreedyOutputIsTheReferenceWhateverTheDrafts) {
  const std::vector<EngineRequest> rs = greedy_requests();
  const SpecRun plain = run(rs, 0, nullptr);
  expect_greedy_reference(plain.results, rs);

  const SpecRun right = run(rs, 4, [](std::span<const int32_t> t) { return greedy_continuation(t, 4); });
  expect_greedy_reference(right.results, rs);
  EXPECT_GT(right.stats.spec_accepted_tokens, 0);
  EXPECT_LT(right.stats.num_steps, plain.stats.num_steps);  // fewer steps for the same tokens
  EXPECT_EQ(right.stats.generation_tokens_total, plain.stats.generation_tokens_total);

  const Proposer wrong_drafts = [](std::span<const int32_t> t) {
    std::vector<int32_t> d = greedy_continuation(t, 3);
    for (auto& x : d) x = (x + 1) % kVocab;
    return d;
  };
  const SpecRun wrong = run(rs, 3, wrong_drafts);
  expect_greedy_reference(wrong.results, rs);
  EXPECT_GT(wrong.stats.spec_draft_tokens, 0);
  EXPECT_EQ(wrong.stats.spec_accepted_tokens, 0);
  // Adaptive (the default): after a step that kept none, a sequence verifies one draft; fixed:
  // always all three. The same output either way.
  const SpecRun wrong_fixed = run(rs, 3, wrong_drafts, 64, false, /*adaptive=*/false);
  expect_greedy_reference(wrong_fixed.results, rs);
  EXPECT_LT(wrong.stats.spec_draft_tokens, wrong_fixed.stats.spec_draft_tokens);

  // Right for two tokens, then wrong: at most two kept a step.
  const SpecRun mixed = run(rs, 5, [](std::span<const int32_t> t) {
    std::vector<int32_t> d = greedy_continuation(t, 5);
    for (size_t i = 2; i < d.size(); ++i) d[i] = (d[i] + 7) % kVocab;
    return d;
  });
  expect_greedy_reference(mixed.results, rs);
  EXPECT_GT(mixed.stats.spec_accepted_tokens, 0);
  EXPECT_LT(mixed.stats.spec_accepted_tokens, mixed.stats.spec_draft_tokens);

  // An executor that takes the argmax where the logits are: every step, drafts or not, is
  // picked there (plain greedy rows), with the same output.
  const SpecRun device = run(rs, 3, [](std::span<const int32_t> t) { return greedy_continuation(t, 3); }, 64, true);
  expect_greedy_reference(device.results, rs);
  EXPECT_GT(device.stats.spec_accepted_tokens, 0);
  EXPECT_EQ(device.argmax_steps, device.stats.num_steps);

  // A budget of 6 tokens a step: drafts are cut to what fits beside the other sequences.
  const SpecRun tight = run(rs, 4, [](std::span<const int32_t> t) { return greedy_continuation(t, 4); }, 6);
  expect_greedy_reference(tight.results, rs);
}

// EOS (token 0) inside the drafts: generation stops there, tokens after it are dropped.
TEST(LlmEngineSpec, StopsInsideTheDrafts) {
  // Find a prompt whose greedy continuation reaches EOS within 12 tokens.
  std::mt19937_64 rng(3);
  std::vector<int32_t> prompt;
  for (int tries = 0; tries < 5000; ++tries) {
    std::vector<int32_t> p(4);
    for (auto& t : p) t = 1 + static_cast<int32_t>(rng() % (kVocab - 1));
    const auto ref = reference_greedy(p, 12, {0}, kVocab, 256);
    if (ref.size() >= 3 && ref.size() < 12 && ref.back() == 0) {
      prompt = p;
      break;
    }
  }
  ASSERT_FALSE(prompt.empty());
  const std::vector<EngineRequest> rs = {greedy_request("eos", prompt, 12)};
  // Drafts run past EOS: the perfect continuation, then more tokens.
  const SpecRun r = run(rs, 6, [](std::span<const int32_t> t) {
    std::vector<int32_t> d = greedy_continuation(t, 6);
    return d;
  });
  expect_greedy_reference(r.results, rs);
  EXPECT_EQ(r.results.at("eos").at(0).reason, FinishReason::kStop);
}

// Sampled requests with a seed: each pick is drawn from the request's own stream as it would be
// without drafts, so the tokens are the same whether drafts are right, wrong or absent.
TEST(LlmEngineSpec, SeededSamplingIsUnchangedByDrafts) {
  std::vector<EngineRequest> rs;
  for (int i = 0; i < 3; ++i) {
    EngineRequest r;
    r.request_id = fmt::format("s{}", i);
    r.prompt_token_ids = {10 + i, 20, 30, 40 + i};
    r.params.temperature = 0.8f;
    r.params.top_p = 0.95f;
    r.params.seed = 77 + i;
    r.params.max_tokens = 24;
    r.params.ignore_eos = true;
    r.params.logprobs = 2;
    rs.push_back(r);
  }
  const SpecRun plain = run(rs, 0, nullptr);
  // Drafts from the plain run's own outputs (right while the history matches one), else noise.
  std::vector<std::vector<int32_t>> known;
  for (const EngineRequest& r : rs) {
    std::vector<int32_t> full = r.prompt_token_ids;
    const auto& toks = plain.results.at(r.request_id).at(0).tokens;
    full.insert(full.end(), toks.begin(), toks.end());
    known.push_back(full);
  }
  auto from_known = [known](std::span<const int32_t> t) {
    for (const auto& full : known)
      if (full.size() > t.size() && std::equal(t.begin(), t.end(), full.begin()))
        return std::vector<int32_t>(full.begin() + static_cast<long>(t.size()),
                                    full.begin() + static_cast<long>(std::min(full.size(), t.size() + 3)));
    return std::vector<int32_t>{1, 2, 3};
  };
  const SpecRun right = run(rs, 3, from_known);
  const SpecRun noise = run(rs, 3, [](std::span<const int32_t> t) { return std::vector<int32_t>{t.back(), 5, 6}; });
  for (const EngineRequest& r : rs) {
    const SampleResult& p = plain.results.at(r.request_id).at(0);
    EXPECT_EQ(right.results.at(r.request_id).at(0).tokens, p.tokens) << r.request_id;
    EXPECT_EQ(noise.results.at(r.request_id).at(0).tokens, p.tokens) << r.request_id;
    // One logprob entry a token, the same values.
    const SampleResult& q = right.results.at(r.request_id).at(0);
    ASSERT_EQ(q.logprobs.size(), p.logprobs.size());
    for (size_t j = 0; j < p.logprobs.size(); ++j) EXPECT_EQ(q.logprobs[j].logprob, p.logprobs[j].logprob);
  }
  EXPECT_GT(right.stats.spec_accepted_tokens, 0);
  EXPECT_LT(right.stats.num_steps, plain.stats.num_steps);
}

// The n-gram drafter itself (no test hook) on prompts that repeat: the same greedy output.
TEST(LlmEngineSpec, NgramDraftsKeepTheOutput) {
  std::vector<EngineRequest> rs;
  std::vector<int32_t> motif = {3, 14, 15, 9, 26, 5};
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> prompt;
    for (int rep = 0; rep < 3 + i; ++rep) prompt.insert(prompt.end(), motif.begin(), motif.end());
    rs.push_back(greedy_request(fmt::format("n{}", i), prompt, 16));
  }
  const SpecRun r = run(rs, 4, nullptr);
  expect_greedy_reference(r.results, rs);
  EXPECT_GT(r.stats.spec_draft_tokens, 0);
}

// A draft model (DraftModel over a second fake): the same fake proposes exactly the target's
// greedy continuation; one of 40 tokens proposes it only where the target's pick is among its
// first 40 (the fake's logits of a smaller vocabulary are a prefix of the larger one's), so
// steps keep some drafts and reject others. Outputs equal the references, greedy and seeded;
// the draft fake's K/V reads are checked too.
TEST(LlmEngineSpec, DraftModelKeepsTheOutput) {
  const std::vector<EngineRequest> rs = greedy_requests();
  for (const int draft_vocab : {kVocab, 40}) {
    EngineSetup s = default_setup();
    s.config.spec.num_tokens = 3;
    FakeExecutorOptions dopt;
    dopt.vocab_size = draft_vocab;
    auto draft = std::make_shared<FakeExecutor>(dopt);
    s.config.spec_draft_model = draft;
    TestEngine te = make_engine(s);
    ASSERT_TRUE(te.engine);
    for (const EngineRequest& r : rs) ASSERT_TRUE(te.engine->add_request(r).is_ok());
    Results res;
    run_all(te, res);
    expect_greedy_reference(res, rs);
    const EngineStats st = te.engine->stats();
    EXPECT_GT(st.spec_accepted_tokens, 0) << draft_vocab;
    if (draft_vocab == kVocab) {
      EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);
    } else {
      EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens);
    }
    EXPECT_TRUE(draft->errors().empty()) << draft->errors().front();
    EXPECT_GT(draft->n_steps(), 0);
  }
  // Seeded sampling: the same tokens as without drafts.
  EngineRequest r;
  r.request_id = "seeded";
  r.prompt_token_ids = {4, 8, 15, 16, 23, 42};
  r.params.temperature = 0.7f;
  r.params.seed = 5;
  r.params.max_tokens = 30;
  r.params.ignore_eos = true;
  const SpecRun plain = run({r}, 0, nullptr);
  EngineSetup s = default_setup();
  s.config.spec.num_tokens = 4;
  s.config.spec_draft_model = std::make_shared<FakeExecutor>();
  TestEngine te = make_engine(s);
  ASSERT_TRUE(te.engine->add_request(r).is_ok());
  Results res;
  run_all(te, res);
  EXPECT_EQ(res["seeded"][0].tokens, plain.results.at("seeded").at(0).tokens);
}

TEST(LlmEngineSpec, RejectsABadConfig) {
  EngineSetup s = default_setup();
  s.config.spec.num_tokens = 2;
  s.config.spec.ngram_min = 3;
  s.config.spec.ngram_max = 2;
  auto res = LlmEngine::create(std::make_unique<FakeExecutor>(s.fake), s.config);
  ASSERT_FALSE(res.is_ok());
  EXPECT_NE(res.message().find("speculative decoding"), std::string::npos) << res.message();
  // A draft model whose vocabulary is larger than the model's.
  EngineSetup d = default_setup();
  d.config.spec.num_tokens = 2;
  FakeExecutorOptions big;
  big.vocab_size = 80;
  d.config.spec_draft_model = std::make_shared<FakeExecutor>(big);
  auto res2 = LlmEngine::create(std::make_unique<FakeExecutor>(d.fake), d.config);
  ASSERT_FALSE(res2.is_ok());
  EXPECT_NE(res2.message().find("vocabulary"), std::string::npos) << res2.message();
}

}  // namespace
}  // namespace ember::testing
