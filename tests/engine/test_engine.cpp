#include "engine_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <span>

namespace ember::testing {
namespace {

std::vector<int32_t> random_prompt(std::mt19937_64& rng, int len, int vocab) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (auto& t : p) t = 1 + static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab - 1));
  return p;
}

TEST(LlmEngine, GreedyMatchesReference) {
  EngineSetup s = default_setup();
  TestEngine te = make_engine(s);
  const std::vector<int32_t> prompt = {5, 9, 3, 7, 11, 2};
  ASSERT_TRUE(te.engine->add_request(greedy_request("a", prompt, 20)).is_ok());
  Results res = run_all(te);
  const auto ref = reference_greedy(prompt, 20, {0}, 64, 256);
  ASSERT_TRUE(res["a"][0].finished);
  EXPECT_EQ(res["a"][0].tokens, ref);
  EXPECT_EQ(res["a"][0].reason, ref.size() < 20 ? FinishReason::kStop : FinishReason::kLength);
  EXPECT_EQ(res["a"][0].num_prompt_tokens, 6);
  EXPECT_EQ(te.engine->stats().kv_blocks_used, 0);
}

// The engine warms its executor up once, with the scheduler's limits, before any step; a
// failed warm-up fails creation with a message that says so; warm_up = false skips it.
TEST(LlmEngine, WarmsUpTheExecutorWithTheSchedulerLimits) {
  {
    EngineSetup s = default_setup();
    s.config.warm_up_graph_seqs = 5;
    TestEngine te = make_engine(s);
    ASSERT_TRUE(te.engine);
    ASSERT_EQ(te.fake->warm_ups().size(), 1u);
    const WarmUpOptions& w = te.fake->warm_ups()[0];
    EXPECT_EQ(w.max_tokens, 64);
    EXPECT_EQ(w.max_seqs, 16);
    EXPECT_EQ(w.graph_seqs, 5);
    ASSERT_TRUE(te.engine->add_request(greedy_request("a", {5, 9, 3}, 4)).is_ok());
    run_all(te);
    EXPECT_EQ(te.fake->warm_ups().size(), 1u);
    EXPECT_TRUE(te.fake->errors().empty()) << te.fake->errors()[0];
  }
  {
    EngineSetup s = default_setup();
    s.config.warm_up = false;
    TestEngine te = make_engine(s);
    ASSERT_TRUE(te.engine);
    EXPECT_TRUE(te.fake->warm_ups().empty());
  }
  {
    EngineSetup s = default_setup();
    s.fake.fail_warm_up = true;
    auto res = LlmEngine::create(std::make_unique<FakeExecutor>(s.fake), s.config);
    ASSERT_FALSE(res.is_ok());
    EXPECT_NE(res.message().find("warm-up"), std::string::npos) << res.message();
    EXPECT_NE(res.message().find("no device memory"), std::string::npos) << res.message();
  }
}

// Executors that pick greedy tokens themselves (GPU argmax) get every step whose requests are
// all plain greedy; a request that needs the logits (logprobs, sampling, penalties, min_tokens
// not yet reached) sends its steps through execute() and the host Sampler. Outputs are the
// same either way.
TEST(LlmEngine, DeviceArgmaxOnlyForPlainGreedySteps) {
  const std::vector<int32_t> p1 = {5, 9, 3, 7, 11, 2}, p2 = {4, 4, 8, 1};
  {  // all greedy: every step through execute_argmax, tokens equal the reference
    EngineSetup s = default_setup();
    s.fake.device_argmax = true;
    TestEngine te = make_engine(s);
    ASSERT_TRUE(te.engine->add_request(greedy_request("a", p1, 20)).is_ok());
    ASSERT_TRUE(te.engine->add_request(greedy_request("b", p2, 15)).is_ok());
    Results res = run_all(te);
    EXPECT_EQ(res["a"][0].tokens, reference_greedy(p1, 20, {0}, 64, 256));
    EXPECT_EQ(res["b"][0].tokens, reference_greedy(p2, 15, {0}, 64, 256));
    EXPECT_GT(te.fake->n_argmax_steps(), 0);
    EXPECT_EQ(te.fake->n_argmax_steps(), te.fake->n_steps());
  }
  {  // a greedy request with logprobs beside it: no argmax step while it runs, logprobs kept
    EngineSetup s = default_setup();
    s.fake.device_argmax = true;
    TestEngine te = make_engine(s);
    EngineRequest lp = greedy_request("lp", p1, 30);
    lp.params.logprobs = 2;
    lp.params.ignore_eos = true;
    ASSERT_TRUE(te.engine->add_request(std::move(lp)).is_ok());
    ASSERT_TRUE(te.engine->add_request(greedy_request("b", p2, 10)).is_ok());
    int with_logprobs = 0, tokens_lp = 0;
    while (te.engine->has_work()) {
      for (const RequestOutput& o : te.engine->step()) {
        if (o.request_id != "lp") continue;
        tokens_lp += static_cast<int>(o.new_token_ids.size());
        with_logprobs += static_cast<int>(o.logprobs.size());
      }
    }
    EXPECT_EQ(tokens_lp, 30);
    EXPECT_EQ(with_logprobs, 30);
    EXPECT_EQ(te.fake->n_argmax_steps(), 0);
  }
  {  // min_tokens: the first steps need the host sampler (EOS suppressed), later ones do not
    EngineSetup s = default_setup();
    s.fake.device_argmax = true;
    TestEngine te = make_engine(s);
    EngineRequest r = greedy_request("m", p1, 12);
    r.params.min_tokens = 4;
    ASSERT_TRUE(te.engine->add_request(std::move(r)).is_ok());
    Results res = run_all(te);
    EXPECT_EQ(static_cast<int>(res["m"][0].tokens.size()) >= 4, true);
    EXPECT_GT(te.fake->n_argmax_steps(), 0);
    EXPECT_LT(te.fake->n_argmax_steps(), te.fake->n_steps());
  }
}

// What a row's adjustment list must hold, built independently of Sampler::token_adjustments
// (a map per token over what the host's processors touch): min_tokens suppression of EOS and
// stop ids, logit_bias, the repetition penalty over prompt + output, presence / frequency over
// output counts; ids outside the vocabulary dropped.
std::vector<TokenAdjust> expected_adjustments(const SamplingParams& p, const std::vector<int32_t>& prompt,
                                              std::span<const int32_t> output, const std::vector<int32_t>& eos,
                                              int vocab) {
  std::map<int32_t, TokenAdjust> m;
  auto at = [&](int32_t t) -> TokenAdjust* {
    if (t < 0 || t >= vocab) return nullptr;
    m[t].token = t;
    return &m[t];
  };
  if (static_cast<int>(output.size()) < p.min_tokens) {
    for (int32_t t : eos)
      if (TokenAdjust* a = at(t); a && !p.ignore_eos) a->flags |= kAdjustSuppress;
    for (int32_t t : p.stop_token_ids)
      if (TokenAdjust* a = at(t)) a->flags |= kAdjustSuppress;
  }
  for (const auto& [t, b] : p.logit_bias)
    if (TokenAdjust* a = at(t)) {
      a->flags |= kAdjustBias;
      a->bias = b;
    }
  if (p.repetition_penalty != 1.0f) {
    for (int32_t t : prompt)
      if (TokenAdjust* a = at(t)) a->flags |= kAdjustRepeat;
    for (int32_t t : output)
      if (TokenAdjust* a = at(t)) a->flags |= kAdjustRepeat;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::map<int32_t, int> count;
    for (int32_t t : output) ++count[t];
    for (const auto& [t, c] : count)
      if (TokenAdjust* a = at(t)) {
        a->flags |= kAdjustSubtract;
        a->subtract = p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
      }
  }
  std::vector<TokenAdjust> out;
  for (const auto& [t, a] : m)
    if (a.flags) out.push_back(a);
  return out;
}

std::string describe(const std::vector<TokenAdjust>& list) {
  std::string s;
  for (const TokenAdjust& a : list) s += fmt::format("[{} f{} b{} s{}] ", a.token, a.flags, a.bias, a.subtract);
  return s;
}

// The logprobs of two runs of one request: each token's logprob, rank and top list (ids in
// order, logprobs) equal.
void expect_same_logprobs(const SampleResult& got, const SampleResult& want, const std::string& id) {
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << id;
  for (size_t i = 0; i < got.logprobs.size(); ++i) {
    const SampleLogprobs &g = got.logprobs[i], &w = want.logprobs[i];
    EXPECT_EQ(g.token_id, w.token_id) << id << " token " << i;
    EXPECT_EQ(g.logprob, w.logprob) << id << " token " << i;
    EXPECT_EQ(g.rank, w.rank) << id << " token " << i;
    ASSERT_EQ(g.top.size(), w.top.size()) << id << " token " << i;
    for (size_t j = 0; j < g.top.size(); ++j) {
      EXPECT_EQ(g.top[j].token_id, w.top[j].token_id) << id << " token " << i << " alternative " << j;
      EXPECT_EQ(g.top[j].logprob, w.top[j].logprob) << id << " token " << i << " alternative " << j;
    }
  }
}

// An engine whose fake offers the device argmax and sampler (device), or neither (the host Sampler).
TestEngine device_sampling_engine(bool device) {
  EngineSetup s = default_setup();
  s.fake.device_argmax = device;
  s.fake.device_sample = device;
  return make_engine(s);
}

// Runs reqs on an engine that samples on the host and on one whose fake samples on the device:
// every step of the latter goes to execute_sample, and its outputs (tokens, logprobs, ranks,
// top lists) equal the host run's. Returns the device run.
std::pair<TestEngine, Results> run_on_device_like_host(const std::vector<EngineRequest>& reqs) {
  auto run = [&](bool device) {
    TestEngine te = device_sampling_engine(device);
    for (const EngineRequest& r : reqs) EXPECT_TRUE(te.engine->add_request(r).is_ok());
    Results res = run_all(te);
    return std::make_pair(std::move(te), std::move(res));
  };
  auto [host, want] = run(false);
  auto [dev, got] = run(true);
  EXPECT_EQ(host.fake->n_sample_steps(), 0);
  EXPECT_GT(dev.fake->n_sample_steps(), 0);
  EXPECT_EQ(dev.fake->n_sample_steps(), dev.fake->n_steps()) << "a step left the device sampler";
  EXPECT_EQ(dev.fake->n_argmax_steps(), 0);
  for (const EngineRequest& r : reqs) {
    const SampleResult &w = want[r.request_id][0], &g = got[r.request_id][0];
    EXPECT_EQ(g.tokens, w.tokens) << r.request_id << ": device-sampled tokens differ from the host Sampler's";
    expect_same_logprobs(g, w, r.request_id);
  }
  return std::make_pair(std::move(dev), std::move(got));
}

// Executors that sample on the device (execute_sample) get the steps whose rows have logit
// bias, penalties or pending min_tokens too, greedy rows included, with each row's adjustment
// list, and top logprob alternatives too; the outputs (tokens, logprobs, ranks and top lists)
// equal a host-sampled run of the same requests.
TEST(LlmEngine, DeviceSamplingTakesBiasPenaltyMinTokensAndTopLogprobsSteps) {
  const std::vector<int32_t> p1 = {5, 9, 3, 7, 11, 2, 5, 5}, p2 = {4, 4, 8, 1}, p3 = {13, 6, 6};
  std::vector<EngineRequest> reqs;
  {
    EngineRequest r = greedy_request("pen", p1, 14);  // greedy: not a plain argmax with penalties
    r.params.repetition_penalty = 1.3f;
    r.params.presence_penalty = 0.4f;
    r.params.frequency_penalty = 0.3f;
    r.params.logit_bias = {{3, -100.0f}, {5, 2.5f}};
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  {
    EngineRequest r = greedy_request("samp", p2, 12);
    r.params.temperature = 0.9f;
    r.params.top_p = 0.9f;
    r.params.min_tokens = 5;
    r.params.stop_token_ids = {7, 0};
    r.params.logit_bias = {{0, 1.5f}, {8, -3.0f}};  // EOS 0: biased and suppressed for 5 tokens
    r.params.seed = 11;
    reqs.push_back(r);
  }
  {
    EngineRequest r = greedy_request("lp", p3, 10);
    r.params.temperature = 0.7f;
    r.params.top_k = 20;
    r.params.frequency_penalty = -0.5f;
    r.params.repetition_penalty = 0.8f;
    r.params.logprobs = 0;
    r.params.seed = 5;
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  {
    EngineRequest r = greedy_request("top", p1, 9);  // the most alternatives a request may ask for
    r.params.temperature = 1.1f;
    r.params.presence_penalty = 0.6f;  // the top list stays the raw model's
    r.params.logprobs = kMaxLogprobs;
    r.params.seed = 23;
    reqs.push_back(r);
  }
  auto [dev, got] = run_on_device_like_host(reqs);
  EXPECT_EQ(got["lp"][0].logprobs.size(), got["lp"][0].tokens.size());
  ASSERT_FALSE(got["top"][0].logprobs.empty());
  EXPECT_EQ(got["top"][0].logprobs[0].top.size(), static_cast<size_t>(kMaxLogprobs));
  EXPECT_GE(got["samp"][0].tokens.size(), 5u);
  // The lists: a row's k-th appearance has k output tokens (no preemption here); each request
  // is told apart by its temperature.
  std::map<std::string, size_t> seen;
  for (const auto& call : dev.fake->sample_calls()) {
    for (const RecordedSampleRow& row : call) {
      const EngineRequest* r = nullptr;
      for (const EngineRequest& q : reqs)
        if (q.params.temperature == (row.spec.greedy ? 0.0f : row.spec.temperature)) r = &q;
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(row.spec.repetition_penalty, r->params.repetition_penalty);
      EXPECT_EQ(row.spec.n_top, r->params.logprobs.value_or(0)) << r->request_id;
      const std::vector<int32_t>& tokens = got[r->request_id][0].tokens;
      const size_t k = seen[r->request_id]++;
      ASSERT_LT(k, tokens.size()) << r->request_id;
      const auto want_list = expected_adjustments(r->params, r->prompt_token_ids,
                                                  std::span<const int32_t>(tokens).first(k), {0}, 64);
      EXPECT_EQ(describe(row.adjust), describe(want_list)) << r->request_id << " with " << k << " output tokens";
    }
  }
  for (const EngineRequest& r : reqs) EXPECT_EQ(seen[r.request_id], got[r.request_id][0].tokens.size()) << r.request_id;
}

// Top logprob alternatives (1, 2, 5 and 20 of them, greedy and sampled) go to the device
// sampler with the rest, and give the host-sampled run's top lists; min_tokens on an otherwise
// plain greedy request goes to the device sampler until it is reached, then to the device argmax.
TEST(LlmEngine, DeviceSamplingTakesTopLogprobsAndMinTokensGoesToArgmaxLater) {
  const std::vector<int32_t> p1 = {5, 9, 3, 7, 11, 2};
  {
    std::vector<EngineRequest> reqs;
    for (const int n_top : {1, 2, 5, kMaxLogprobs}) {
      EngineRequest r = greedy_request(fmt::format("top{}", n_top), p1, 8);
      r.params.logprobs = n_top;
      r.params.repetition_penalty = 1.2f;
      if (n_top % 2 == 1) {
        r.params.temperature = 0.8f;
        r.params.seed = static_cast<uint64_t>(n_top);
      }
      reqs.push_back(std::move(r));
    }
    const Results got = run_on_device_like_host(reqs).second;
    for (const EngineRequest& r : reqs) {
      const SampleResult& g = got.at(r.request_id).at(0);
      ASSERT_FALSE(g.logprobs.empty()) << r.request_id;
      EXPECT_EQ(g.logprobs[0].top.size(), static_cast<size_t>(*r.params.logprobs)) << r.request_id;
    }
  }
  {
    TestEngine te = device_sampling_engine(true);
    EngineRequest r = greedy_request("m", p1, 12);
    r.params.min_tokens = 4;
    r.params.ignore_eos = false;
    ASSERT_TRUE(te.engine->add_request(std::move(r)).is_ok());
    Results res = run_all(te);
    ASSERT_GE(res["m"][0].tokens.size(), 4u);
    EXPECT_EQ(te.fake->n_sample_steps(), 4) << "one device-sampled step per token below min_tokens";
    EXPECT_EQ(te.fake->n_argmax_steps(), te.fake->n_steps() - 4);
    for (const auto& call : te.fake->sample_calls()) {
      ASSERT_EQ(call.size(), 1u);
      EXPECT_EQ(describe(call[0].adjust), describe({TokenAdjust{0, kAdjustSuppress, 0.0f, 0.0f}}));
    }
  }
}

// Batch invariance: every greedy request's output equals its solo reference whatever the
// batching: staggered arrivals, shared prefixes (prefix-cache hits), chunked prefill with tiny
// budgets, and a KV cache so small that requests get preempted and recomputed.
struct Variant {
  const char* name;
  bool prefix_caching;
  int budget;
  int threshold;
  int n_blocks;
  bool chunked;
  SchedulerPolicy policy;
};

class BatchInvariance : public ::testing::TestWithParam<Variant> {};

TEST_P(BatchInvariance, GreedyOutputsEqualSoloReference) {
  const Variant v = GetParam();
  EngineSetup s = default_setup();
  s.config.n_blocks = v.n_blocks;
  s.config.scheduler.enable_prefix_caching = v.prefix_caching;
  s.config.scheduler.max_num_batched_tokens = v.budget;
  s.config.scheduler.long_prefill_token_threshold = v.threshold;
  s.config.scheduler.enable_chunked_prefill = v.chunked;
  s.config.scheduler.policy = v.policy;
  TestEngine te = make_engine(s);
  std::mt19937_64 rng(42);
  const std::vector<int32_t> system_a = random_prompt(rng, 13, 64);
  const std::vector<int32_t> system_b = random_prompt(rng, 8, 64);
  struct Pending {
    EngineRequest req;
    int arrive_step;
  };
  std::vector<Pending> pending;
  for (int i = 0; i < 24; ++i) {
    std::vector<int32_t> prompt;
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0) prompt = system_a;
    if (kind == 1) prompt = system_b;
    const auto tail = random_prompt(rng, 1 + static_cast<int>(rng() % 20), 64);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    EngineRequest r = greedy_request(fmt::format("r{}", i), prompt, 1 + static_cast<int>(rng() % 30));
    r.priority = static_cast<int>(rng() % 3);
    pending.push_back({r, static_cast<int>(rng() % 40)});
  }
  Results res;
  for (int step = 0; step < 5000; ++step) {
    for (const Pending& p : pending) {
      if (p.arrive_step == step) {
        ASSERT_TRUE(te.engine->add_request(p.req).is_ok());
      }
    }
    if (step > 40 && !te.engine->has_work()) break;
    checked_step(te, res);
    if (HasFatalFailure()) return;
  }
  for (const Pending& p : pending) {
    const SampleResult& r = res[p.req.request_id][0];
    ASSERT_TRUE(r.finished) << p.req.request_id;
    EXPECT_EQ(r.tokens, reference_greedy(p.req.prompt_token_ids, *p.req.params.max_tokens, {0}, 64, 256))
        << v.name << " " << p.req.request_id;
  }
  const EngineStats st = te.engine->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  if (v.n_blocks < 40) {
    EXPECT_GT(st.num_preemptions, 0) << "the variant should preempt";
  }
  if (v.prefix_caching) {
    EXPECT_GT(st.prefix_cache_hits, 0);
  } else {
    EXPECT_EQ(st.prefix_cache_hits, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Engine, BatchInvariance,
    ::testing::Values(Variant{"plain", false, 256, 0, 256, true, SchedulerPolicy::kFcfs},
                      Variant{"prefix", true, 256, 0, 256, true, SchedulerPolicy::kFcfs},
                      Variant{"chunked7", true, 7, 0, 256, true, SchedulerPolicy::kFcfs},
                      Variant{"threshold3", true, 32, 3, 256, true, SchedulerPolicy::kFcfs},
                      Variant{"no_chunking", true, 64, 0, 256, false, SchedulerPolicy::kFcfs},
                      Variant{"tiny_kv", true, 32, 0, 24, true, SchedulerPolicy::kFcfs},
                      Variant{"tiny_kv_nocache", false, 16, 0, 20, true, SchedulerPolicy::kFcfs},
                      Variant{"tiny_kv_priority", true, 24, 5, 22, true, SchedulerPolicy::kPriority}),
    [](const ::testing::TestParamInfo<Variant>& p) { return std::string(p.param.name); });

TEST(LlmEngine, ParallelSamplesShareThePromptAndCopyOnWrite) {
  EngineSetup s = default_setup();
  TestEngine te = make_engine(s);
  EngineRequest r;
  r.request_id = "multi";
  r.prompt_token_ids = {3, 4, 5, 6, 7, 8, 9};  // 7 tokens, block 4: last prompt block half full
  r.params.n = 4;
  r.params.temperature = 1.5f;
  r.params.seed = 7;
  r.params.max_tokens = 12;
  r.params.ignore_eos = true;
  ASSERT_TRUE(te.engine->add_request(r).is_ok());
  Results res = run_all(te);
  ASSERT_EQ(res["multi"].size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (auto& [index, sample] : res["multi"]) {
    ASSERT_TRUE(sample.finished);
    EXPECT_EQ(sample.tokens.size(), 12u);
    distinct.insert(sample.tokens);
    // Every token was sampled from logits over this sample's true history: with a broken
    // copy-on-write a sample would read its siblings' tokens.
    std::vector<int32_t> hist = r.prompt_token_ids;
    for (int32_t t : sample.tokens) {
      EXPECT_TRUE(te.fake->saw_sequence(hist)) << "sample " << index;
      hist.push_back(t);
    }
  }
  EXPECT_GT(distinct.size(), 1u);
  // The prompt ran once, not four times, and its half block was copied for three samples.
  EXPECT_EQ(te.engine->stats().prompt_tokens_computed, 7);
  EXPECT_EQ(te.fake->n_block_copies(), 3);
  EXPECT_EQ(te.engine->stats().kv_blocks_used, 0);
}

TEST(LlmEngine, GreedyParallelSamplesAreIdentical) {
  EngineSetup s = default_setup();
  TestEngine te = make_engine(s);
  EngineRequest r = greedy_request("g", {1, 2, 3, 4, 5}, 10);
  r.params.n = 3;
  ASSERT_TRUE(te.engine->add_request(r).is_ok());
  Results res = run_all(te);
  const auto ref = reference_greedy(r.prompt_token_ids, 10, {0}, 64, 256);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(res["g"][i].tokens, ref);
}

// A seeded request samples the same tokens alone and amid other traffic.
TEST(LlmEngine, SeededSamplingIgnoresBatchNeighbours) {
  auto run = [](bool crowded) {
    EngineSetup s = default_setup();
    s.config.scheduler.max_num_batched_tokens = 16;
    s.config.deterministic = false;  // only the request's own seed may matter
    TestEngine te = make_engine(s);
    std::mt19937_64 rng(5);
    if (crowded) {
      for (int i = 0; i < 6; ++i) {
        EngineRequest o;
        o.request_id = fmt::format("other{}", i);
        o.prompt_token_ids = random_prompt(rng, 9, 64);
        o.params.temperature = 1.0f;
        o.params.max_tokens = 15;
        EXPECT_TRUE(te.engine->add_request(o).is_ok());
      }
    }
    EngineRequest r;
    r.request_id = "seeded";
    r.prompt_token_ids = {10, 20, 30, 40, 50};
    r.params.temperature = 0.9f;
    r.params.top_p = 0.9f;
    r.params.seed = 1234;
    r.params.n = 2;
    r.params.max_tokens = 20;
    r.params.ignore_eos = true;
    EXPECT_TRUE(te.engine->add_request(r).is_ok());
    Results res = run_all(te);
    return std::make_pair(res["seeded"][0].tokens, res["seeded"][1].tokens);
  };
  const auto alone = run(false);
  const auto crowded = run(true);
  EXPECT_EQ(alone, crowded);
  EXPECT_NE(alone.first, alone.second);  // samples of one request differ from each other
}

TEST(LlmEngine, StopConditions) {
  EngineSetup s = default_setup();
  TestEngine te = make_engine(s);
  const std::vector<int32_t> prompt = {7, 7, 7};
  const auto free_run = reference_greedy(prompt, 40, {}, 64, 256, /*ignore_eos=*/true);
  ASSERT_GE(free_run.size(), 10u);
  // Stop on the 5th reference token via stop_token_ids (unless it shows up earlier).
  EngineRequest stop = greedy_request("stop", prompt, 40);
  stop.params.stop_token_ids = {free_run[4]};
  stop.params.ignore_eos = true;
  EngineRequest min_tok = stop;
  min_tok.request_id = "min";
  min_tok.params.min_tokens = 6;  // suppresses the stop token for 6 outputs
  EngineRequest len = greedy_request("len", prompt, 3);
  len.params.ignore_eos = true;
  EngineRequest ctx = greedy_request("ctx", prompt, 253);  // 3 + 253 = the context window
  ctx.params.ignore_eos = true;
  for (const auto& r : {stop, min_tok, len, ctx}) ASSERT_TRUE(te.engine->add_request(r).is_ok());
  Results res = run_all(te);

  const auto first_stop = std::find(free_run.begin(), free_run.end(), free_run[4]) - free_run.begin();
  EXPECT_EQ(res["stop"][0].reason, FinishReason::kStop);
  EXPECT_EQ(res["stop"][0].tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + first_stop + 1));
  EXPECT_EQ(res["len"][0].reason, FinishReason::kLength);
  EXPECT_EQ(res["len"][0].tokens.size(), 3u);
  EXPECT_EQ(res["ctx"][0].reason, FinishReason::kLength);
  EXPECT_EQ(res["ctx"][0].tokens.size(), 253u);
  // min_tokens: at least 6 tokens, none of the first 6 is the stop token, and if it stopped
  // it stopped on the stop token.
  const auto& m = res["min"][0].tokens;
  ASSERT_GE(m.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(m[i], free_run[4]);
  if (res["min"][0].reason == FinishReason::kStop) {
    EXPECT_EQ(m.back(), free_run[4]);
  }
}

TEST(LlmEngine, EosEndsUnlessIgnored) {
  EngineSetup s = default_setup();
  std::mt19937_64 rng(3);
  // Find a prompt whose greedy continuation hits EOS (token 0) early.
  std::vector<int32_t> prompt;
  std::vector<int32_t> ref;
  for (int tries = 0; tries < 1000; ++tries) {
    prompt = random_prompt(rng, 4, 64);
    ref = reference_greedy(prompt, 30, {0}, 64, 256);
    if (ref.size() < 30 && ref.back() == 0) break;
  }
  ASSERT_EQ(ref.back(), 0);
  s.config.eos_token_ids = {0};
  TestEngine te = make_engine(s);
  ASSERT_TRUE(te.engine->add_request(greedy_request("eos", prompt, 30)).is_ok());
  EngineRequest ign = greedy_request("ign", prompt, 30);
  ign.params.ignore_eos = true;
  ASSERT_TRUE(te.engine->add_request(ign).is_ok());
  std::vector<RequestOutput> last_eos;
  Results res;
  while (te.engine->has_work()) {
    auto outs = te.engine->step();
    for (auto& o : outs)
      if (o.request_id == "eos" && o.finished) last_eos.push_back(o);
    collect(outs, res);
  }
  EXPECT_EQ(res["eos"][0].tokens, ref);
  EXPECT_EQ(res["eos"][0].reason, FinishReason::kStop);
  ASSERT_EQ(last_eos.size(), 1u);
  EXPECT_EQ(last_eos[0].stop_token_id, std::optional<int32_t>(0));
  EXPECT_EQ(res["ign"][0].tokens.size(), 30u);
  EXPECT_EQ(res["ign"][0].reason, FinishReason::kLength);
}

TEST(LlmEngine, LogprobsAreRawModelLogSoftmax) {
  EngineSetup s = default_setup();
  TestEngine te = make_engine(s);
  EngineRequest r = greedy_request("lp", {4, 8, 15, 16, 23, 42}, 5);
  r.params.logprobs = 3;
  r.params.repetition_penalty = 1.3f;  // processing must not change the reported logprobs
  r.params.ignore_eos = true;
  ASSERT_TRUE(te.engine->add_request(r).is_ok());
  Results res = run_all(te);
  const SampleResult& out = res["lp"][0];
  ASSERT_EQ(out.logprobs.size(), out.tokens.size());
  std::vector<int32_t> hist = r.prompt_token_ids;
  std::vector<float> logits(64);
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    FakeExecutor::logits_for(hist, 64, logits.data());
    double m = -1e30, sum = 0;
    for (float x : logits) m = std::max(m, static_cast<double>(x));
    for (float x : logits) sum += std::exp(x - m);
    const double lse = m + std::log(sum);
    const SampleLogprobs& lp = out.logprobs[i];
    EXPECT_EQ(lp.token_id, out.tokens[i]);
    EXPECT_NEAR(lp.logprob, logits[static_cast<size_t>(out.tokens[i])] - lse, 1e-5);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
    EXPECT_NEAR(lp.top[0].logprob, m - lse, 1e-5);
    hist.push_back(out.tokens[i]);
  }
}

TEST(LlmEngine, RejectsBadRequestsWithClearStatus) {
  EngineSetup s = default_setup();
  TestEngine te = make_engine(s);
  EngineRequest too_long = greedy_request("x", std::vector<int32_t>(250, 1), 10);
  Status st = te.engine->add_request(too_long);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("context window"), std::string::npos) << st.message();
  EngineRequest bad_p = greedy_request("y", {1, 2}, 10);
  bad_p.params.top_p = 1.5f;
  st = te.engine->add_request(bad_p);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("top_p"), std::string::npos) << st.message();
  EngineRequest bad_tok = greedy_request("z", {1, 64}, 10);
  st = te.engine->add_request(bad_tok);
  EXPECT_NE(st.message().find("vocabulary"), std::string::npos) << st.message();
  EXPECT_FALSE(te.engine->add_request(greedy_request("e", {}, 10)).is_ok());
  ASSERT_TRUE(te.engine->add_request(greedy_request("dup", {1}, 10)).is_ok());
  st = te.engine->add_request(greedy_request("dup", {1}, 10));
  EXPECT_NE(st.message().find("already in use"), std::string::npos) << st.message();
}

TEST(LlmEngine, AbortFreesBlocksAtOnce) {
  EngineSetup s = default_setup();
  TestEngine te = make_engine(s);
  EngineRequest r = greedy_request("a", std::vector<int32_t>(30, 5), 100);
  r.params.ignore_eos = true;
  r.params.n = 2;
  ASSERT_TRUE(te.engine->add_request(r).is_ok());
  ASSERT_TRUE(te.engine->add_request(greedy_request("b", {1, 2, 3}, 5)).is_ok());
  Results res;
  for (int i = 0; i < 3; ++i) checked_step(te, res);
  EXPECT_GT(te.engine->stats().kv_blocks_used, 0);
  ASSERT_TRUE(te.engine->abort("a"));
  EXPECT_FALSE(te.engine->abort("a"));
  EXPECT_FALSE(te.engine->abort("nope"));
  ASSERT_TRUE(te.engine->scheduler().check_invariants().is_ok());
  // Only b's blocks remain.
  const int used_after = te.engine->stats().kv_blocks_used;
  EXPECT_LE(used_after, 2);
  checked_step(te, res);
  ASSERT_TRUE(res["a"][0].finished && res["a"][1].finished);
  EXPECT_EQ(res["a"][0].reason, FinishReason::kAbort);
  run_all(te, res);
  EXPECT_TRUE(res["b"][0].finished);
  EXPECT_EQ(te.engine->stats().kv_blocks_used, 0);
  EXPECT_EQ(te.engine->stats().requests_aborted, 1);
}

TEST(LlmEngine, ExecutorFailureEndsTheStepsRequestsWithError) {
  EngineSetup s = default_setup();
  s.fake.fail_on_step = 2;
  expect_failure_ends_the_request(s, greedy_request("a", {1, 2, 3}, 10));
}

TEST(LlmEngine, PrefixCacheSkipsComputeAndReportsCachedTokens) {
  EngineSetup s = default_setup();
  TestEngine te = make_engine(s);
  std::vector<int32_t> shared(20, 9);
  std::vector<int32_t> p1 = shared, p2 = shared;
  p1.push_back(1);
  p2.push_back(2);
  ASSERT_TRUE(te.engine->add_request(greedy_request("first", p1, 3)).is_ok());
  Results res = run_all(te);
  ASSERT_TRUE(te.engine->add_request(greedy_request("second", p2, 3)).is_ok());
  const int64_t before = te.fake->n_tokens_computed();
  Results res2 = run_all(te);
  EXPECT_EQ(res2["second"][0].num_cached_tokens, 20);
  // 1 prompt token plus 2 decode steps ran for the second request.
  EXPECT_EQ(te.fake->n_tokens_computed() - before, 3);
  EXPECT_EQ(res2["second"][0].tokens, reference_greedy(p2, 3, {0}, 64, 256));
  const EngineStats st = te.engine->stats();
  EXPECT_EQ(st.prefix_cache_queries, 42);
  EXPECT_EQ(st.prefix_cache_hits, 20);
  EXPECT_NEAR(st.prefix_cache_hit_rate, 20.0 / 42.0, 1e-9);
  // A different salt shares nothing.
  EngineRequest salted = greedy_request("salted", p2, 3);
  salted.cache_salt = "tenant";
  ASSERT_TRUE(te.engine->add_request(salted).is_ok());
  Results res3 = run_all(te);
  EXPECT_EQ(res3["salted"][0].num_cached_tokens, 0);
}

TEST(LlmEngine, SizesTheCacheFromBytes) {
  EngineSetup s = default_setup();
  s.config.n_blocks = 0;
  s.config.kv_cache_bytes = 64 * 4 * 100 + 7;  // 100 blocks of 4 tokens x 64 bytes
  TestEngine te = make_engine(s);
  ASSERT_TRUE(te.engine);
  EXPECT_EQ(te.engine->num_kv_blocks(), 100);
  s.config.kv_cache_bytes = 10;
  auto res = LlmEngine::create(std::make_unique<FakeExecutor>(s.fake), s.config);
  EXPECT_FALSE(res.is_ok());
  s.config.kv_cache_bytes = 0;
  EXPECT_FALSE(LlmEngine::create(std::make_unique<FakeExecutor>(s.fake), s.config).is_ok());
}

}  // namespace
}  // namespace ember::testing
