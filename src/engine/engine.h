#pragma once
// LlmEngine: the synchronous step loop. add_request / abort / step / has_work, single-threaded
// (AsyncEngine runs it on its own thread). One step = schedule -> copy-on-write block copies ->
// ModelExecutor::execute -> sample -> scheduler update -> outputs.
#include "core/status.h"
#include "engine/outputs.h"
#include "runner/model_executor.h"
#include "sched/scheduler_config.h"
#include "spec/ngram_proposer.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace ember {

class ArgmaxPipeline;
class DraftModel;
class JsonVocab;
class Scheduler;
class Sampler;
struct SampledToken;
struct SchedulerOutput;
struct SeqUpdate;

struct EngineConfig {
  // KV cache size: n_blocks when > 0, else kv_cache_bytes / executor->kv_bytes_per_block().
  int n_blocks = 0;
  size_t kv_cache_bytes = 0;
  // scheduler.block_size, .max_num_batched_tokens, ... ; scheduler.n_blocks and
  // scheduler.max_model_len are filled in by the engine (max_model_len: the executor's
  // max_context() when left at 0 or larger than it).
  SchedulerConfig scheduler;
  // Token ids that end generation unless SamplingParams::ignore_eos (from the tokenizer /
  // generation_config.json).
  std::vector<int32_t> eos_token_ids;
  // Deterministic mode: requests without a seed get one derived from `seed` and their id, so a
  // run is reproducible. Greedy outputs are batch-invariant as long as the executor is (the
  // engine never reorders or splits work depending on batch neighbours' values).
  bool deterministic = false;
  uint64_t seed = 0;  // base seed; ignored unless deterministic (else from std::random_device)
  // Host threads for sampling the steps that go through full logits (see Sampler): 1 on the
  // CPU backend, whose cores run the model; more on a GPU, where they are otherwise idle.
  int sampler_threads = 1;
  // Pipelined greedy decode: while a greedy step runs, the next decode step is scheduled and
  // queued with its tokens fed from the running step's picks on the device, so the host's
  // work (scheduling, the step's upload and launch, detokenizing outputs) overlaps the
  // device's. kAuto: when the executor queues steps asynchronously (can_pipeline_argmax, a
  // GPU runner); kOn: whenever it has execute_argmax (steps then run when queued: the same
  // schedule and results, for tests); kOff: never. A sequence that stops on a token costs one
  // wasted row in the step queued behind it.
  enum class Pipeline { kAuto, kOn, kOff };
  Pipeline pipeline = Pipeline::kAuto;
  // Before the first request: ModelExecutor::warm_up for the scheduler's limits (a GPU runner
  // sizes its buffers and captures the decode graphs of 1..warm_up_graph_seqs sequences;
  // -1: the executor's default (16 for a GPU runner), 0: none; other shapes are captured on
  // their second step).
  bool warm_up = true;
  int warm_up_graph_seqs = -1;
  std::function<void(int done, int total)> warm_up_progress;
  // Speculative decoding with n-gram drafts (spec.num_tokens > 0): each decode step also
  // verifies up to spec.num_tokens drafts from propose_ngram, keeping those its picks confirm,
  // so the output is what it would be without (greedy and seeded sampling alike) in fewer steps.
  // Such steps sample on the host from full logits (or take the executor's argmax of each row
  // when every request is plain greedy), and pipelining is off.
  NgramSpecConfig spec;
  // Tests: drafts from this instead of propose_ngram (given a sequence's tokens so far).
  std::function<std::vector<int32_t>(std::span<const int32_t>)> propose_drafts;
  // Drafts from a smaller model of the same vocabulary instead (DraftModel: its greedy
  // continuation, spec.num_tokens a step), with a K/V cache of as many blocks as the target's.
  // Shared only so that the config stays copyable: the engine is its one user.
  std::shared_ptr<ModelExecutor> spec_draft_model;
  // Token texts for SamplingParams::json_object (from the tokenizer); without them such
  // requests are refused.
  std::shared_ptr<const JsonVocab> json_vocab;
};

class LlmEngine {
 public:
  // Sizes the KV cache, allocates it on the executor and builds the scheduler.
  static Result<std::unique_ptr<LlmEngine>> create(std::unique_ptr<ModelExecutor> executor,
                                                   EngineConfig config);
  ~LlmEngine();
  LlmEngine(const LlmEngine&) = delete;
  LlmEngine& operator=(const LlmEngine&) = delete;

  // Checks a request without adding it (params, token ids in vocab, prompt + max_tokens within
  // the context window, n vs max_num_seqs). Const and touches no mutable state, so AsyncEngine
  // calls it from client threads.
  Status validate(const EngineRequest& request) const;
  Status add_request(EngineRequest request);
  // Aborts every sample of the request and frees its blocks now; the final output (finished,
  // kAbort) comes from the next step(). Returns false if the id is unknown or already finished.
  bool abort(const std::string& request_id);
  // Runs one step (may run no model work if only aborts are pending) and returns the outputs.
  std::vector<RequestOutput> step();
  bool has_work() const;

  EngineStats stats() const;
  const EngineConfig& config() const { return config_; }
  int vocab_size() const { return vocab_size_; }
  int max_model_len() const { return config_.scheduler.max_model_len; }
  int num_kv_blocks() const { return config_.scheduler.n_blocks; }
  // Error of the last failed execute (requests in that step finished with kError).
  const Status& last_error() const { return last_error_; }

  // Test hooks: the scheduler (for invariant checks) and the executor.
  const Scheduler& scheduler() const { return *scheduler_; }
  ModelExecutor& executor() { return *executor_; }

 private:
  LlmEngine(std::unique_ptr<ModelExecutor> executor, EngineConfig config);

  std::vector<Request> make_samples(EngineRequest request);
  void emit(const std::vector<SeqUpdate>& updates, std::vector<RequestOutput>& outputs);
  // Speculative decoding: drafts for every running sequence about to decode.
  void propose_drafts();
  // Picks of a step with drafts: per sample, each row's in order (on the host with the confirmed
  // drafts in the history, or from_argmax the executor's argmax of the row) until one differs
  // from its draft.
  std::vector<std::vector<SampledToken>> sample_speculative(const SchedulerOutput& so, bool from_argmax);
  // Pipelined greedy steps: queue the continuation of inflight_ (when the scheduler allows
  // one), then collect inflight_'s tokens and apply them.
  void step_pipelined(std::vector<RequestOutput>& outputs);
  bool continues_greedy(const SchedulerOutput& prev) const;
  // A failed step: last_error_ from st, its sequences finished with kError.
  void fail_step(const Status& st, const SchedulerOutput& so, std::vector<RequestOutput>& outputs);

  std::unique_ptr<ModelExecutor> executor_;
  EngineConfig config_;
  int vocab_size_ = 0;
  std::mt19937_64 seeder_;  // seeds of requests without one
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<float> logits_;
  std::vector<int32_t> argmax_ids_;  // execute_argmax results (greedy steps on the device)
  std::vector<DeviceSampleSpec> sample_specs_;  // execute_sample rows (sampled steps on the device)
  std::vector<DeviceSampled> device_sampled_;
  std::vector<RequestOutput> pending_outputs_;  // abort outputs waiting for the next step()
  std::unique_ptr<ArgmaxPipeline> pipeline_;    // null unless config_.pipeline allows it
  std::unique_ptr<DraftModel> draft_;           // config_.spec_draft_model's drafter, or null
  std::unique_ptr<SchedulerOutput> inflight_;   // a queued greedy step whose tokens are not applied yet
  // A continuation scheduled behind inflight_ but slow to queue (queues_quickly): queued at the
  // start of the next step(), after inflight_'s tokens went out; feed as for enqueue_argmax.
  std::unique_ptr<SchedulerOutput> deferred_;
  std::vector<int32_t> deferred_feed_;
  Status last_error_;
  struct Counters;
  std::unique_ptr<Counters> counters_;
};

}  // namespace ember
