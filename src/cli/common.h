#pragma once
// Options and set-up shared by the CLI commands: which model, where it runs, how big the KV
// cache is, and the batching limits (`ember run`, `serve` and `bench` take the same ones).
#include "engine/engine.h"
#include "runner/model_runner.h"
#include "tokenizer/tokenizer.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

namespace ember {

struct ModelOptions {
  std::string model;
  int threads = 0;
  std::string device = "cpu";
  std::string kv_dtype = "auto";
  bool batch_invariant = false;
  bool mmap = false;  // keep a GGUF file memory-mapped instead of reading it into memory
  std::string weight_format = "auto";
  int tensor_parallel = 1;  // ranks (GPUs, or CPU thread groups) a model is split over
  // KV cache size per rank: "auto" = 1GiB on the CPU, on a GPU what gpu_memory_utilization of
  // the free device memory leaves after the weights and activations.
  std::string kv_cache_memory = "auto";
  double gpu_memory_utilization = 0.9;
  int block_size = 16;
  // 0 = by device: 2048 tokens / 64 sequences per step on the CPU, 8192 / 256 on CUDA (a GPU
  // step costs about the same for 64 or 256 decodes: the weights are read once either way).
  int max_num_batched_tokens = 0;
  int max_num_seqs = 0;
  int sampler_threads = 0;  // 0: auto
  std::string pipeline = "auto";  // EngineConfig::pipeline: auto, on, off
  int warmup_graphs = -1;  // EngineConfig::warm_up_graph_seqs: -1 = the runner's default (16)
  bool no_prefix_cache = false;
  int spec_ngram = 0;       // EngineConfig::spec.num_tokens: n-gram drafts a decode step (0: off)
  int spec_ngram_max = 3;   // EngineConfig::spec.ngram_max
  std::string spec_draft_model;  // EngineConfig::spec_draft_model: a checkpoint of the same vocabulary
  int spec_draft_tokens = 4;     // its drafts a decode step
  bool spec_fixed = false;       // EngineConfig::spec.adaptive off
  bool deterministic = false;
  uint64_t seed = 0;
};

void add_model_options(CLI::App& app, ModelOptions& o, bool engine_options = true);
Result<size_t> parse_bytes(const std::string& text);
// Parses "1,2,3" (commas or spaces).
Result<std::vector<int32_t>> parse_ids(const std::string& text);
// Loads the model with a progress bar and logs the load time.
Result<std::unique_ptr<ModelRunner>> load_runner(const ModelOptions& o);
// ModelRunner::finish_load with a progress bar for the move into huge-page memory; call it
// once the tokenizer and template are built from the metadata.
Status finish_model_load(ModelRunner& runner, const ModelOptions& o);
// The tokenizer of a checkpoint: GGUF metadata or the HF directory's tokenizer.json.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const WeightSource& source);
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model_path);
// Stop ids: the tokenizer's EOS ids (if any) and the model config's.
std::vector<int32_t> stop_token_ids(const ModelConfig& config, const Tokenizer* tokenizer);
// tokenizer (may be null): its token texts let requests ask for JSON output (json_object).
Result<std::unique_ptr<LlmEngine>> make_engine(std::unique_ptr<ModelRunner> runner, const ModelOptions& o,
                                               std::vector<int32_t> eos_ids, const Tokenizer* tokenizer = nullptr);

}  // namespace ember
