#include "cli/common.h"

#include "cli/progress.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "sample/json_constraint.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <filesystem>
#include <memory>
#include <optional>

namespace ember {

void add_model_options(CLI::App& app, ModelOptions& o, bool engine_options) {
  app.add_option("-m,--model", o.model, "GGUF file or Hugging Face directory")->required();
  app.add_option("-t,--threads", o.threads, "CPU threads (default: one per core)");
  app.add_option("--device", o.device, "cpu, cuda or cuda:N");
  app.add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                 "CUDA: fraction of the free GPU memory (after the weights) for the KV cache and activations")
      ->check(CLI::Range(0.01, 1.0));
  app.add_flag("--batch-invariant", o.batch_invariant,
               "CPU: each row's result independent of its batch, so outputs do not depend on what runs beside a request (slower prefill)");
  app.add_flag("--mmap", o.mmap,
               "CPU: keep the GGUF file memory-mapped (page cache, shared, quicker start) instead of reading the weights "
               "into huge-page memory, which decode streams up to 2x faster (docs/PERFORMANCE.md)");
  app.add_option("--kv-dtype", o.kv_dtype,
                 "KV cache dtype: auto (f32 for f32 checkpoints, else f16; bf16 on CUDA), f32, f16, bf16, int8, fp8_e4m3, fp8_e5m2");
  app.add_option("--weight-format", o.weight_format,
                 "CUDA: matrices on the GPU as auto (bf16), bf16, int4 (group 128, quantized at load), fp8 (e4m3, per-row "
                 "scales) or int8 (per-row scales)");
  app.add_option("--tensor-parallel-size,--tp", o.tensor_parallel,
                 "split the model over N ranks (heads and FFN columns, one all-reduce per block): GPUs cuda:0.. "
                 "(NCCL) with --device cuda, else N groups of the CPU threads")
      ->check(CLI::Range(1, 64));
  if (!engine_options) return;
  app.add_option("--kv-cache-memory", o.kv_cache_memory,
                 "KV cache size (per rank with --tensor-parallel-size), e.g. 512MiB, 2GiB; auto: 1GiB on the CPU, from "
                 "--gpu-memory-utilization on CUDA");
  app.add_option("--block-size", o.block_size, "tokens per KV block")->check(CLI::Range(1, 1024));
  app.add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "token budget per step (default 2048 on the CPU, 8192 on CUDA)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-num-seqs", o.max_num_seqs, "sequences per step (default 64 on the CPU, 256 on CUDA)")->check(CLI::Range(1, 4096));
  app.add_option("--sampler-threads", o.sampler_threads,
                 "host threads sampling full logits (default 1 on the CPU, up to 16 with CUDA)")
      ->check(CLI::Range(1, 256));
  app.add_option("--pipeline", o.pipeline,
                 "greedy decode steps queued one ahead, tokens fed on the device, so host work overlaps the GPU's: "
                 "auto (on where the device queues steps: CUDA on one GPU), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--warmup-graphs", o.warmup_graphs,
                 "CUDA: capture the decode graphs of 1..N sequences at start (default 16, at most --max-num-seqs; 0: "
                 "capture each batch size on its second step instead)")
      ->check(CLI::Range(0, 4096));
  app.add_flag("--no-prefix-cache", o.no_prefix_cache, "disable prefix caching");
  app.add_option("--spec-ngram", o.spec_ngram,
                 "speculative decoding: each decode step also verifies up to N draft tokens copied from where the "
                 "sequence's last tokens occurred before (prompt lookup); same output, fewer steps where text repeats "
                 "(0: off; such steps sample on the host, without pipelining)")
      ->check(CLI::Range(0, 64));
  app.add_option("--spec-ngram-max", o.spec_ngram_max, "speculative decoding: the longest suffix looked up (1 token is the shortest)")
      ->check(CLI::Range(1, 64));
  app.add_option("--spec-draft-model", o.spec_draft_model,
                 "speculative decoding with a draft model: a smaller checkpoint of the same vocabulary (GGUF or HF "
                 "directory, run on the same device) proposes its greedy continuation; same output, fewer steps of the "
                 "main model where the two agree");
  app.add_option("--spec-draft-tokens", o.spec_draft_tokens, "speculative decoding: the draft model's tokens a step")
      ->check(CLI::Range(1, 64));
  app.add_flag("--spec-fixed", o.spec_fixed,
               "speculative decoding: always verify the full number of drafts (by default a sequence verifies one "
               "more than its last step kept, up to that number)");
  app.add_flag("--deterministic", o.deterministic, "reproducible sampling without per-request seeds");
}

Result<size_t> parse_bytes(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    return Status::errorf("'{}' is not a size (e.g. 512MiB, 2GiB)", text);
  }
  std::string unit = text.substr(pos);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  double mult = 1;
  if (unit == "" || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else return Status::errorf("'{}': unknown size unit '{}'", text, unit);
  if (!(value > 0)) return Status::errorf("'{}': size must be positive", text);
  return static_cast<size_t>(value * mult);
}

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string cur;
  auto flush = [&]() -> Status {
    if (cur.empty()) return Status::ok();
    try {
      size_t pos = 0;
      long long v = std::stoll(cur, &pos);
      if (pos != cur.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(cur);
      ids.push_back(static_cast<int32_t>(v));
    } catch (...) {
      return Status::errorf("'{}' is not a token id", cur);
    }
    cur.clear();
    return Status::ok();
  };
  for (char c : text) {
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      EMBER_RETURN_IF_ERROR(flush());
    } else {
      cur += c;
    }
  }
  EMBER_RETURN_IF_ERROR(flush());
  if (ids.empty()) return Status::error("no token ids given");
  return ids;
}

Result<std::unique_ptr<ModelRunner>> load_runner(const ModelOptions& o) {
  RunnerOptions ro;
  ro.device = o.device;
  ro.n_threads = o.threads;
  ro.batch_invariant = o.batch_invariant;
  ro.mmap = o.mmap;
  ro.weight_format = o.weight_format;
  ro.tensor_parallel = o.tensor_parallel;
  auto source_probe = WeightSource::open(o.model);
  if (!source_probe.is_ok()) return source_probe.status();
  if (o.kv_dtype == "auto" && o.device.rfind("cuda", 0) == 0) {
    ro.kv_dtype = DType::BF16;  // what the tensor-core attention kernels read
  } else if (o.kv_dtype == "auto") {
    // fp32 checkpoints keep an fp32 cache (exact); anything smaller gets f16, as llama.cpp does.
    bool all_f32 = true;
    for (const auto& name : (*source_probe)->tensor_names()) {
      auto t = (*source_probe)->tensor(name);
      if (t.is_ok() && t->n_dims == 2 && t->dtype != DType::F32) all_f32 = false;
    }
    ro.kv_dtype = all_f32 ? DType::F32 : DType::F16;
  } else {
    EMBER_ASSIGN_OR_RETURN(ro.kv_dtype, parse_kv_dtype(o.kv_dtype));
  }
  source_probe = Status::ok();  // release the probe's mappings before the real load
  ProgressBar bar("loading " + std::filesystem::path(o.model).filename().string(), 1);
  ro.progress = [&bar](int done, int total) {
    bar.set_total(total);
    bar.update(done, "layers");
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto runner = ModelRunner::load(o.model, ro);
  if (!runner.is_ok()) return runner.status();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bar.finish();
  const auto& c = (*runner)->config();
  const int tp = (*runner)->tensor_parallel();
  EMBER_LOG_INFO("loaded {} ({} layers, d_model {}, vocab {}) in {:.2f}s on {}{}", c.arch_name, c.n_layers,
                 c.d_model, c.n_vocab, secs, (*runner)->backend().name(),
                 tp > 1 ? fmt::format(" (rank 0 of {}, tensor parallel)", tp) : "");
  return runner;
}

Status finish_model_load(ModelRunner& runner, const ModelOptions& o) {
  std::optional<ProgressBar> bar;
  return runner.finish_load([&](size_t done, size_t total) {
    if (!bar) bar.emplace("weights into memory", static_cast<int64_t>(total >> 20));
    bar->update(static_cast<int64_t>(done >> 20), "MiB");
    if (done == total) bar->finish();
  });
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const WeightSource& source) {
  if (source.format() == CheckpointFormat::GGUF) return Tokenizer::from_gguf_metadata(source.metadata());
  return Tokenizer::from_hf_dir(source.path());
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model_path) {
  EMBER_ASSIGN_OR_RETURN(auto source, WeightSource::open(model_path));
  return load_tokenizer(*source);
}

std::vector<int32_t> stop_token_ids(const ModelConfig& config, const Tokenizer* tokenizer) {
  std::vector<int32_t> ids;
  if (tokenizer != nullptr) ids = tokenizer->eos_ids();
  for (int id : config.eos_token_ids)
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

Result<std::unique_ptr<LlmEngine>> make_engine(std::unique_ptr<ModelRunner> runner, const ModelOptions& o,
                                               std::vector<int32_t> eos_ids, const Tokenizer* tokenizer) {
  EngineConfig ec;
  if (tokenizer != nullptr) ec.json_vocab = std::make_shared<const JsonVocab>(tokenizer->token_bytes_table());
  const bool gpu = runner->backend().device() == Device::CUDA;
  const int max_tokens = o.max_num_batched_tokens > 0 ? o.max_num_batched_tokens : (gpu ? 8192 : 2048);
  const int max_seqs = o.max_num_seqs > 0 ? o.max_num_seqs : (gpu ? 256 : 64);
  ec.scheduler.block_size = o.block_size;
  ec.scheduler.max_num_batched_tokens = max_tokens;
  ec.scheduler.max_num_seqs = max_seqs;
  ec.scheduler.enable_prefix_caching = !o.no_prefix_cache;
  ec.eos_token_ids = std::move(eos_ids);
  ec.deterministic = o.deterministic;
  ec.seed = o.seed;
  ec.pipeline = o.pipeline == "on"    ? EngineConfig::Pipeline::kOn
                : o.pipeline == "off" ? EngineConfig::Pipeline::kOff
                                      : EngineConfig::Pipeline::kAuto;
  ec.warm_up_graph_seqs = o.warmup_graphs;
  ec.spec.num_tokens = o.spec_ngram;
  ec.spec.ngram_max = o.spec_ngram_max;
  ec.spec.adaptive = !o.spec_fixed;
  // The draft model loads before the GPU's K/V budget is measured, so its weights are not
  // counted as free; it keeps as many blocks as the target, so the budget is split between
  // the two caches by their bytes a block.
  std::unique_ptr<ModelRunner> draft;
  if (!o.spec_draft_model.empty()) {
    if (o.spec_ngram > 0) return Status::error("--spec-ngram and --spec-draft-model: choose one drafter");
    ModelOptions d = o;
    d.model = o.spec_draft_model;
    d.tensor_parallel = 1;
    auto loaded = load_runner(d);
    if (!loaded.is_ok()) return loaded.status().with_context("draft model");
    EMBER_RETURN_IF_ERROR(finish_model_load(**loaded, d).with_context("draft model"));
    draft = std::move(*loaded);
    ec.spec.num_tokens = o.spec_draft_tokens;
  }
  if (o.kv_cache_memory == "auto" && gpu) {
    EMBER_ASSIGN_OR_RETURN(ec.kv_cache_bytes, runner->device_kv_budget(o.gpu_memory_utilization, max_tokens, max_seqs));
    if (draft) {
      const double target = static_cast<double>(runner->kv_bytes_per_block(o.block_size));
      const double both = target + static_cast<double>(draft->kv_bytes_per_block(o.block_size));
      ec.kv_cache_bytes = static_cast<size_t>(static_cast<double>(ec.kv_cache_bytes) * (target / both));
    }
  } else {
    EMBER_ASSIGN_OR_RETURN(ec.kv_cache_bytes, parse_bytes(o.kv_cache_memory == "auto" ? "1GiB" : o.kv_cache_memory));
  }
  ec.spec_draft_model = std::move(draft);
  // (shared: the engine keeps its config, and so this callback, beyond this scope)
  auto bar = std::make_shared<std::optional<ProgressBar>>();
  ec.warm_up_progress = [bar](int done, int total) {
    if (!*bar) bar->emplace("warming up decode graphs", total);
    (*bar)->update(done, "steps");
    if (done == total) (*bar)->finish();
  };
  ec.sampler_threads = o.sampler_threads > 0 ? o.sampler_threads : gpu ? std::clamp(ThreadPool::default_threads(), 1, 16) : 1;
  auto engine = LlmEngine::create(std::move(runner), ec);
  if (!engine.is_ok()) return engine.status();
  return engine;
}

}  // namespace ember
