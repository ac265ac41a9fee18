#include "engine/engine.h"

#include "core/check.h"
#include "core/log.h"
#include "core/step_profile.h"
#include "engine/argmax_pipeline.h"
#include "engine/draft_model.h"
#include "kv/kv_cache_manager.h"
#include "sample/sampler.h"
#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>

namespace ember {

namespace {
// splitmix64 finalizer: spreads (seed, index) pairs into unrelated stream seeds.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

struct LlmEngine::Counters {
  int64_t prompt_tokens_total = 0;
  int64_t prompt_tokens_computed = 0;
  int64_t generation_tokens_total = 0;
  int64_t num_steps = 0;
  int64_t requests_finished = 0;
  int64_t requests_aborted = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
};

Result<std::unique_ptr<LlmEngine>> LlmEngine::create(std::unique_ptr<ModelExecutor> executor,
                                                     EngineConfig config) {
  if (config.spec.num_tokens < 0 || config.spec.ngram_min < 1 || config.spec.ngram_max < config.spec.ngram_min)
    return Status::errorf("speculative decoding: {} drafts over n-grams of {}..{} tokens (want >= 0 drafts, 1 <= min <= max)",
                          config.spec.num_tokens, config.spec.ngram_min, config.spec.ngram_max);
  if (!executor) return Status::error("LlmEngine needs a model executor");
  SchedulerConfig& sc = config.scheduler;
  const int max_context = executor->max_context();
  if (sc.max_model_len <= 0 || sc.max_model_len > max_context) sc.max_model_len = max_context;
  if (sc.block_size < 1) return Status::errorf("block_size must be >= 1, got {}", sc.block_size);
  const size_t block_bytes = executor->kv_bytes_per_block(sc.block_size);
  int n_blocks = config.n_blocks;
  if (n_blocks <= 0) {
    if (config.kv_cache_bytes == 0)
      return Status::error("the KV cache size is not set (n_blocks or kv_cache_bytes)");
    n_blocks = kv_blocks_for_budget(config.kv_cache_bytes, block_bytes);
    if (n_blocks < 1)
      return Status::errorf("a KV cache budget of {} bytes holds no block ({} bytes each)",
                            config.kv_cache_bytes, block_bytes);
  }
  sc.n_blocks = n_blocks;
  EMBER_RETURN_IF_ERROR(sc.validate().with_context("scheduler config"));
  EMBER_RETURN_IF_ERROR(
      executor->allocate_kv_cache(KvCacheConfig{n_blocks, sc.block_size}).with_context("KV cache"));
  std::unique_ptr<DraftModel> draft;
  if (config.spec_draft_model) {
    if (config.spec.num_tokens <= 0) return Status::error("speculative decoding: a draft model needs drafts a step (> 0)");
    if (config.spec_draft_model->vocab_size() > executor->vocab_size())
      return Status::errorf("speculative decoding: the draft model's vocabulary ({}) is larger than the model's ({})",
                            config.spec_draft_model->vocab_size(), executor->vocab_size());
    EMBER_ASSIGN_OR_RETURN(draft, DraftModel::create(config.spec_draft_model, n_blocks, sc.block_size));
  }
  EMBER_LOG_INFO("KV cache: {} blocks x {} tokens = {} tokens, {:.1f} MiB", n_blocks,
                 sc.block_size, static_cast<int64_t>(n_blocks) * sc.block_size,
                 static_cast<double>(block_bytes) * n_blocks / (1024.0 * 1024.0));
  if (config.warm_up) {
    WarmUpOptions wo;
    wo.max_tokens = sc.max_num_batched_tokens;
    wo.max_seqs = sc.max_num_seqs;
    wo.graph_seqs = config.warm_up_graph_seqs;
    wo.progress = config.warm_up_progress;
    EMBER_RETURN_IF_ERROR(executor->warm_up(wo).with_context("warm-up"));
  }
  std::unique_ptr<LlmEngine> engine(new LlmEngine(std::move(executor), std::move(config)));
  engine->draft_ = std::move(draft);
  return engine;
}

LlmEngine::LlmEngine(std::unique_ptr<ModelExecutor> executor, EngineConfig config)
    : executor_(std::move(executor)),
      config_(std::move(config)),
      vocab_size_(executor_->vocab_size()),
      seeder_(config_.deterministic ? config_.seed : std::random_device{}()),
      scheduler_(std::make_unique<Scheduler>(config_.scheduler, config_.eos_token_ids)),
      sampler_(std::make_unique<Sampler>(config_.eos_token_ids, config_.sampler_threads)),
      counters_(std::make_unique<Counters>()) {
  const bool speculative = config_.spec.num_tokens > 0;  // (its steps sample on the host)
  const bool pipeline = speculative ? false
                        : config_.pipeline == EngineConfig::Pipeline::kOn
                            ? executor_->can_execute_argmax() || executor_->can_pipeline_argmax()
                            : config_.pipeline == EngineConfig::Pipeline::kAuto && executor_->can_pipeline_argmax();
  if (pipeline) pipeline_ = std::make_unique<ArgmaxPipeline>(*executor_);
  sampler_->set_json_vocab(config_.json_vocab);
}

LlmEngine::~LlmEngine() {
  if (inflight_) {  // the executor must not be destroyed under a queued step
    std::vector<int32_t> ids;
    (void)pipeline_->collect(ids);
  }
  if (step_profile::enabled()) fmt::print(stderr, "{}", step_profile::report());
}

Status LlmEngine::validate(const EngineRequest& request) const {
  if (request.request_id.empty()) return Status::error("the request id must not be empty");
  EMBER_RETURN_IF_ERROR(request.params.validate(vocab_size_));
  if (request.params.json_object && !config_.json_vocab)
    return Status::error("response_format json_object needs the model's tokenizer, which this engine was not given");
  for (int32_t t : request.prompt_token_ids) {
    if (t < 0 || t >= vocab_size_)
      return Status::errorf("prompt token id {} is outside the vocabulary (size {})", t, vocab_size_);
  }
  return scheduler_->check_request(static_cast<int>(request.prompt_token_ids.size()),
                                   request.params);
}

std::vector<Request> LlmEngine::make_samples(EngineRequest request) {
  const SamplingParams& p = request.params;
  // Seeded requests and deterministic mode get streams that depend only on the request,
  // never on arrival order or batch neighbours.
  uint64_t base = 0;
  if (p.seed) {
    base = mix64(*p.seed);
  } else if (config_.deterministic) {
    base = mix64(config_.seed ^ std::hash<std::string>{}(request.request_id));
  } else {
    base = seeder_();
  }
  std::vector<Request> samples(static_cast<size_t>(p.n));
  for (int i = 0; i < p.n; ++i) {
    Request& r = samples[static_cast<size_t>(i)];
    r.request_id = request.request_id;
    r.sample_index = i;
    r.token_ids = request.prompt_token_ids;
    r.num_prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
    r.params = p;
    r.arrival_time = request.arrival_time.value_or(Clock::now());
    r.priority = request.priority;
    r.cache_salt = request.cache_salt;
    r.rng.seed(mix64(base + static_cast<uint64_t>(i)));
  }
  return samples;
}

Status LlmEngine::add_request(EngineRequest request) {
  EMBER_RETURN_IF_ERROR(validate(request));
  const int64_t n_prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  EMBER_RETURN_IF_ERROR(scheduler_->add_request(make_samples(std::move(request))));
  counters_->prompt_tokens_total += n_prompt;
  return Status::ok();
}

bool LlmEngine::abort(const std::string& request_id) {
  const std::vector<SeqUpdate> updates = scheduler_->abort(request_id);
  if (updates.empty()) return false;
  ++counters_->requests_aborted;
  emit(updates, pending_outputs_);
  return true;
}

void LlmEngine::emit(const std::vector<SeqUpdate>& updates, std::vector<RequestOutput>& outputs) {
  for (const SeqUpdate& u : updates) {
    RequestOutput o;
    o.request_id = u.request_id;
    o.index = u.sample_index;
    o.new_token_ids = u.new_tokens;
    o.finished = u.finished;
    o.finish_reason = u.finish_reason;
    o.stop_token_id = u.stop_token_id;
    o.num_prompt_tokens = u.num_prompt_tokens;
    o.num_cached_tokens = u.num_cached_tokens;
    o.num_output_tokens = u.num_output_tokens;
    if (u.finish_reason == FinishReason::kError) o.error = last_error_.message();
    if (u.finished) ++counters_->requests_finished;
    outputs.push_back(std::move(o));
  }
}

std::vector<RequestOutput> LlmEngine::step() {
  std::vector<RequestOutput> outputs = std::move(pending_outputs_);
  pending_outputs_.clear();
  // Queue the continuation held back from the last step, then go on as usual; unless requests
  // that could be admitted arrived since: then it is dropped and the next schedule() admits
  // them beside the decodes (the slots it allocated stay with their sequences, which need them).
  if (deferred_ && scheduler_->can_admit_waiting()) deferred_.reset();
  if (deferred_) {
    std::unique_ptr<SchedulerOutput> d = std::move(deferred_);
    // (rows of sequences gone since stay in the batch: the feed rows fit it)
    auto live = [&](const ScheduledSeq& s) { return scheduler_->still_scheduled(s); };
    if (std::any_of(d->seqs.begin(), d->seqs.end(), live)) {
      Status st;
      {
        step_profile::Scope t("engine: enqueue (held back)");
        st = pipeline_->enqueue(d->batch, deferred_feed_);
      }
      if (!st.is_ok()) {
        fail_step(st, *d, outputs);
        return outputs;
      }
      ++counters_->num_steps;
      inflight_ = std::move(d);
    }
  }
  if (inflight_) {
    step_pipelined(outputs);
    return outputs;
  }
  if (!scheduler_->has_work()) return outputs;
  const auto t0 = std::chrono::steady_clock::now();
  if (config_.spec.num_tokens > 0) propose_drafts();
  SchedulerOutput so = scheduler_->schedule();
  if (so.empty()) return outputs;
  const bool speculative = std::any_of(so.samples.begin(), so.samples.end(),
                                       [](const SampleSlot& s) { return s.n_drafts > 0; });
  ++counters_->num_steps;
  if (step_profile::enabled()) {  // the step's kind is known once it is scheduled
    step_profile::begin_step(so.batch.n_tokens() == so.batch.n_seqs(), so.batch.n_seqs(), so.batch.n_tokens());
    step_profile::add("engine: schedule",
                      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  struct StepWall {  // the whole step, scheduling included
    std::chrono::steady_clock::time_point t0;
    ~StepWall() {
      step_profile::add("step (wall)",
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  } t_step{t0};

  // Every row a plain argmax: let the executor pick the tokens where the logits are.
  // (with drafts too: every row's pick is then the argmax the executor returns for it)
  bool argmax_step = executor_->can_execute_argmax();
  for (size_t i = 0; argmax_step && i < so.samples.size(); ++i) {
    const Request* r = scheduler_->find(so.samples[i].seq_id);
    argmax_step = r != nullptr && is_plain_argmax(r->params, r->output().size());
  }

  // The Sampler's view of the step's rows (request params, token history, random stream).
  auto sampler_rows = [&] {
    std::vector<SamplerRow> rows;
    rows.reserve(so.samples.size());
    for (const SampleSlot& slot : so.samples) {
      Request* r = scheduler_->find(slot.seq_id);
      EMBER_CHECK(r != nullptr);
      rows.push_back({slot.logits_row, &r->params, r->prompt(), r->output(), &r->rng});
    }
    return rows;
  };

  // Otherwise, every row one the device sampler takes (all but requests for more than
  // kDeviceMaxTopLogprobs top logprob alternatives, which validate() refuses anyway):
  // sample there; the uniform draws come from each request's random stream, as on the host,
  // and bias / penalties / min_tokens travel as per-token lists (Sampler::token_adjustments).
  bool device_sample_step = !speculative && !argmax_step && executor_->can_execute_sample();
  for (size_t i = 0; device_sample_step && i < so.samples.size(); ++i) {
    const Request* r = scheduler_->find(so.samples[i].seq_id);
    device_sample_step = r != nullptr && is_device_sampleable(r->params);
  }
  if (device_sample_step) {
    const std::vector<SamplerRow> rows = sampler_rows();
    // Views into the sampler's storage: valid through execute_sample (no other call between).
    const std::vector<std::span<const TokenAdjust>> adjust = sampler_->token_adjustments(rows, vocab_size_);
    sample_specs_.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const SamplingParams& p = *rows[i].params;
      sample_specs_[i] = DeviceSampleSpec::of(p, rows[i].logits_row, p.is_greedy() ? 0.0 : uniform01(*rows[i].rng));
      sample_specs_[i].adjust = adjust[i];
    }
  }

  Status st;
  if (!so.block_copies.empty()) st = executor_->copy_blocks(so.block_copies);
  if (argmax_step && pipeline_) {  // queue it; its tokens come back in step_pipelined
    if (st.is_ok()) {
      step_profile::Scope t_exec("engine: enqueue");
      st = pipeline_->enqueue(so.batch, {});
    }
    if (!st.is_ok()) {
      fail_step(st, so, outputs);
      return outputs;
    }
    inflight_ = std::make_unique<SchedulerOutput>(std::move(so));
    step_pipelined(outputs);
    return outputs;
  }
  {
    step_profile::Scope t_exec("engine: execute");
    if (st.is_ok() && device_sample_step) {
      st = executor_->execute_sample(so.batch, sample_specs_, device_sampled_);
      if (st.is_ok() && device_sampled_.size() != sample_specs_.size())
        st = Status::errorf("the executor returned {} sampled tokens, expected {}", device_sampled_.size(),
                            sample_specs_.size());
      for (size_t i = 0; st.is_ok() && i < sample_specs_.size(); ++i) {
        const DeviceSampleSpec& spec = sample_specs_[i];
        const size_t want_top = spec.logprob ? std::min(static_cast<size_t>(spec.n_top), static_cast<size_t>(vocab_size_)) : 0;
        if (device_sampled_[i].top.size() != want_top)
          st = Status::errorf("the executor returned {} top logprobs for row {}, expected {}",
                              device_sampled_[i].top.size(), i, want_top);
      }
    } else if (st.is_ok() && argmax_step) {
      st = executor_->execute_argmax(so.batch, argmax_ids_);
      if (st.is_ok() && argmax_ids_.size() != so.batch.logit_rows.size())
        st = Status::errorf("the executor returned {} argmax ids, expected {}", argmax_ids_.size(),
                            so.batch.logit_rows.size());
    } else if (st.is_ok()) {
      st = executor_->execute(so.batch, logits_);
      const size_t n_expected = so.batch.logit_rows.size() * static_cast<size_t>(vocab_size_);
      if (st.is_ok() && logits_.size() != n_expected)
        st = Status::errorf("the executor returned {} logits, expected {}", logits_.size(), n_expected);
    }
  }
  if (!st.is_ok()) {
    fail_step(st, so, outputs);
    return outputs;
  }

  for (const ScheduledSeq& s : so.seqs) {
    const Request* r = scheduler_->find(s.seq_id);
    const int end = s.n_computed_before + s.n_new_tokens;
    counters_->prompt_tokens_computed +=
        std::max(0, std::min(end, r->num_prompt_tokens) - s.n_computed_before);
  }
  step_profile::Scope t_sample("engine: sample");
  if (speculative) {
    std::vector<std::vector<SampledToken>> picks = sample_speculative(so, argmax_step);
    std::vector<std::vector<int32_t>> tokens(picks.size());
    for (size_t i = 0; i < picks.size(); ++i) {
      for (const SampledToken& p : picks[i]) tokens[i].push_back(p.token_id);
      const int n_drafts = so.samples[i].n_drafts, kept = static_cast<int>(picks[i].size()) - 1;
      counters_->spec_draft_tokens += n_drafts;
      counters_->spec_accepted_tokens += kept;
      // Next step's cap: one more after a step that kept every draft, else one past what it kept.
      if (n_drafts > 0)
        if (Request* r = scheduler_->find(so.samples[i].seq_id))
          r->draft_limit = kept == n_drafts ? std::min(config_.spec.num_tokens, n_drafts + 1) : kept + 1;
    }
    t_sample.stop();
    step_profile::Scope t_update("engine: update + emit");
    const std::vector<SeqUpdate> updates = scheduler_->update(so, std::span<const std::vector<int32_t>>(tokens));
    const size_t first = outputs.size();
    emit(updates, outputs);
    EMBER_CHECK(outputs.size() - first == picks.size());
    for (size_t i = 0; i < picks.size(); ++i) {
      RequestOutput& o = outputs[first + i];
      counters_->generation_tokens_total += static_cast<int64_t>(o.new_token_ids.size());
      // (tokens after a stop were dropped: their logprobs too)
      for (size_t j = 0; j < o.new_token_ids.size(); ++j)
        if (picks[i][j].logprobs) o.logprobs.push_back(*picks[i][j].logprobs);
    }
    return outputs;
  }
  std::vector<SampledToken> sampled;
  if (device_sample_step) {
    sampled.resize(so.samples.size());
    for (size_t i = 0; i < so.samples.size(); ++i) {
      sampled[i].token_id = device_sampled_[i].token_id;
      if (sample_specs_[i].logprob)
        sampled[i].logprobs = SampleLogprobs{device_sampled_[i].token_id, device_sampled_[i].logprob,
                                             device_sampled_[i].rank, std::move(device_sampled_[i].top)};
    }
  } else if (argmax_step) {
    sampled.resize(so.samples.size());
    for (size_t i = 0; i < so.samples.size(); ++i) {
      const int row = so.samples[i].logits_row;
      EMBER_CHECK(row >= 0 && static_cast<size_t>(row) < argmax_ids_.size());
      sampled[i].token_id = argmax_ids_[static_cast<size_t>(row)];
    }
  } else {
    sampled = sampler_->sample(logits_, vocab_size_, sampler_rows());
  }
  std::vector<int32_t> tokens(sampled.size());
  for (size_t i = 0; i < sampled.size(); ++i) tokens[i] = sampled[i].token_id;
  counters_->generation_tokens_total += static_cast<int64_t>(tokens.size());
  t_sample.stop();

  step_profile::Scope t_update("engine: update + emit");
  const std::vector<SeqUpdate> updates = scheduler_->update(so, tokens);
  const size_t first = outputs.size();
  emit(updates, outputs);
  // update() returns one update per sample, in order: attach the logprobs.
  EMBER_CHECK(outputs.size() - first == sampled.size());
  for (size_t i = 0; i < sampled.size(); ++i) {
    if (sampled[i].logprobs) outputs[first + i].logprobs.push_back(*sampled[i].logprobs);
  }
  return outputs;
}

void LlmEngine::propose_drafts() {
  // Sequences about to decode: not a prompt's chunks nor its last token (where n > 1 samples fork).
  std::vector<Request*> seqs;
  for (const SeqId seq : scheduler_->running()) {
    Request* r = scheduler_->find(seq);
    if (r != nullptr && r->num_tokens() - r->num_computed_tokens == 1 && r->num_output_tokens() > 0) seqs.push_back(r);
  }
  std::vector<std::vector<int32_t>> drafts(seqs.size());
  if (draft_) {
    std::vector<SeqId> ids;
    std::vector<std::span<const int32_t>> tokens;
    for (const Request* r : seqs) {
      ids.push_back(r->seq_id);
      tokens.push_back(r->token_ids);
    }
    if (const Status st = draft_->propose(ids, tokens, config_.spec.num_tokens, drafts); !st.is_ok()) {
      EMBER_LOG_WARN("speculative decoding: {} (this step runs without drafts)", st.message());
      return;
    }
    // (ids the model's vocabulary lacks end the drafts)
    for (std::vector<int32_t>& d : drafts)
      d.erase(std::find_if(d.begin(), d.end(), [&](int32_t t) { return t < 0 || t >= vocab_size_; }), d.end());
  } else {
    for (size_t i = 0; i < seqs.size(); ++i)
      drafts[i] = config_.propose_drafts ? config_.propose_drafts(seqs[i]->token_ids)
                                         : propose_ngram(seqs[i]->token_ids, config_.spec);
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    Request* r = seqs[i];
    const int cap = config_.spec.adaptive && r->draft_limit >= 0 ? r->draft_limit : config_.spec.num_tokens;
    if (static_cast<int>(drafts[i].size()) > cap) drafts[i].resize(static_cast<size_t>(cap));
    r->draft_ids = std::move(drafts[i]);
  }
}

std::vector<std::vector<SampledToken>> LlmEngine::sample_speculative(const SchedulerOutput& so, bool from_argmax) {
  std::vector<std::vector<SampledToken>> picks(so.samples.size());
  std::vector<int32_t> history;
  for (size_t i = 0; i < so.samples.size(); ++i) {
    const SampleSlot& slot = so.samples[i];
    Request* r = scheduler_->find(slot.seq_id);
    EMBER_CHECK(r != nullptr && static_cast<int>(r->draft_ids.size()) == slot.n_drafts);
    // Row d picks the token after draft d - 1 with the drafts before it in the history, from the
    // request's own random stream: each pick is drawn as it would be without drafts, so a
    // confirmed draft is exactly a token that would have been generated (for a one-token draft
    // this is rejection sampling: kept with the pick's probability of it, else the pick is a
    // draw from the rest of the distribution).
    history.assign(r->output().begin(), r->output().end());
    for (int d = 0; d <= slot.n_drafts; ++d) {
      const int row = slot.logits_row + d;
      if (from_argmax) {
        picks[i].push_back({argmax_ids_.at(static_cast<size_t>(row)), std::nullopt});
      } else {
        const std::span<const float> row_logits(
            logits_.data() + static_cast<size_t>(row) * static_cast<size_t>(vocab_size_), static_cast<size_t>(vocab_size_));
        const SamplerRow sr{row, &r->params, r->prompt(), history, &r->rng};
        picks[i].push_back(sampler_->sample_row(row_logits, sr));
      }
      if (d == slot.n_drafts || picks[i].back().token_id != r->draft_ids[static_cast<size_t>(d)]) break;
      history.push_back(r->draft_ids[static_cast<size_t>(d)]);
    }
  }
  return picks;
}

bool LlmEngine::continues_greedy(const SchedulerOutput& prev) const {
  for (const ScheduledSeq& s : prev.seqs) {
    const Request* r = scheduler_->find(s.seq_id);
    // (the continuation samples after prev's token is appended: one more output token)
    if (r != nullptr && !is_plain_argmax(r->params, r->output().size() + 1)) return false;
  }
  return true;
}

void LlmEngine::fail_step(const Status& st, const SchedulerOutput& so, std::vector<RequestOutput>& outputs) {
  last_error_ = st.with_context("model step");
  EMBER_LOG_ERROR("{}", last_error_.message());
  emit(scheduler_->fail(so), outputs);  // (sequences already gone are skipped)
}

void LlmEngine::step_pipelined(std::vector<RequestOutput>& outputs) {
  if (step_profile::enabled())
    step_profile::begin_step(inflight_->batch.n_tokens() == inflight_->batch.n_seqs(), inflight_->batch.n_seqs(),
                             inflight_->batch.n_tokens());
  step_profile::Scope t_step("step (wall, pipelined)");
  // The next decode step goes into the queue before this one's tokens are waited for.
  std::unique_ptr<SchedulerOutput> next;
  if (continues_greedy(*inflight_)) {
    step_profile::Scope t("engine: schedule + enqueue next");
    std::vector<int32_t> feed;
    std::optional<SchedulerOutput> c = scheduler_->schedule_continuation(*inflight_, feed);
    if (c) {
      if (!executor_->queues_quickly(c->batch)) {  // queue it once this step's tokens are out
        deferred_ = std::make_unique<SchedulerOutput>(std::move(*c));
        deferred_feed_ = std::move(feed);
        c.reset();
      }
    }
    if (c) {
      const Status st = pipeline_->enqueue(c->batch, feed);
      if (st.is_ok()) {
        ++counters_->num_steps;
        next = std::make_unique<SchedulerOutput>(std::move(*c));
      } else {
        fail_step(st, *c, outputs);
      }
    }
  }
  std::vector<int32_t> ids;
  Status st;
  {
    step_profile::Scope t("engine: collect");
    st = pipeline_->collect(ids);
  }
  SchedulerOutput done = std::move(*inflight_);
  inflight_ = std::move(next);
  if (st.is_ok() && ids.size() != done.batch.logit_rows.size())
    st = Status::errorf("the executor returned {} argmax ids, expected {}", ids.size(), done.batch.logit_rows.size());
  if (!st.is_ok()) {
    fail_step(st, done, outputs);
    deferred_.reset();  // (its tokens were to come from the failed step)
    if (inflight_) {  // drain the step queued behind it and fail it too
      (void)pipeline_->collect(ids);
      emit(scheduler_->fail(*inflight_), outputs);
      inflight_.reset();
    }
    return;
  }
  step_profile::Scope t_update("engine: update + emit");
  std::vector<int32_t> tokens(done.samples.size());
  for (size_t i = 0; i < done.samples.size(); ++i) {
    const int row = done.samples[i].logits_row;
    EMBER_CHECK(row >= 0 && static_cast<size_t>(row) < ids.size());
    tokens[i] = ids[static_cast<size_t>(row)];
  }
  // Aborts since it was queued, or a stop token the step before it picked, may have ended
  // some of its sequences: their rows are dropped.
  scheduler_->without_finished(done, tokens);
  for (const ScheduledSeq& s : done.seqs) {
    const Request* r = scheduler_->find(s.seq_id);
    const int end = s.n_computed_before + s.n_new_tokens;
    counters_->prompt_tokens_computed += std::max(0, std::min(end, r->num_prompt_tokens) - s.n_computed_before);
  }
  counters_->generation_tokens_total += static_cast<int64_t>(tokens.size());
  emit(scheduler_->update(done, tokens), outputs);
}

bool LlmEngine::has_work() const {
  return !pending_outputs_.empty() || inflight_ != nullptr || deferred_ != nullptr || scheduler_->has_work();
}

EngineStats LlmEngine::stats() const {
  const SchedulerStats ss = scheduler_->stats();
  EngineStats s;
  s.num_running = ss.num_running;
  s.num_waiting = ss.num_waiting;
  s.num_waiting_requests = ss.num_waiting_requests;
  s.kv_blocks_used = ss.kv.n_used;
  s.kv_blocks_total = ss.kv.n_blocks;
  s.block_size = config_.scheduler.block_size;
  s.prefix_cache_queries = ss.kv.prefix_queries;
  s.prefix_cache_hits = ss.kv.prefix_hits;
  s.prefix_cache_hit_rate =
      ss.kv.prefix_queries > 0
          ? static_cast<double>(ss.kv.prefix_hits) / static_cast<double>(ss.kv.prefix_queries)
          : 0.0;
  s.kv_slots_allocated = ss.kv.slots_allocated;
  s.kv_slots_used = ss.kv.slots_used;
  s.kv_unused_fraction =
      ss.kv.slots_allocated > 0
          ? 1.0 - static_cast<double>(ss.kv.slots_used) / static_cast<double>(ss.kv.slots_allocated)
          : 0.0;
  s.num_preemptions = ss.num_preemptions;
  s.prompt_tokens_total = counters_->prompt_tokens_total;
  s.prompt_tokens_computed = counters_->prompt_tokens_computed;
  s.generation_tokens_total = counters_->generation_tokens_total;
  s.num_steps = counters_->num_steps;
  s.spec_draft_tokens = counters_->spec_draft_tokens;
  s.spec_accepted_tokens = counters_->spec_accepted_tokens;
  s.requests_finished = counters_->requests_finished;
  s.requests_aborted = counters_->requests_aborted;
  return s;
}

}  // namespace ember
