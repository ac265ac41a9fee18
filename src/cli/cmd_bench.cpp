// `ember bench speed`: prompt processing and decode speed of one sequence, as llama-bench
// measures them (pp: one prefill of P tokens; tg: G single-token decode steps), so the two
// engines compare on the same file and thread count.
// `ember bench throughput`: offline serving throughput through the engine (bench_throughput.cpp).
#include "cli/bench_throughput.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "core/step_profile.h"
#include "engine/argmax_pipeline.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

namespace ember {

namespace {

struct SpeedOptions {
  ModelOptions model;
  int n_prompt = 512;
  int n_gen = 128;
  int repetitions = 3;
  bool host_argmax = false;
  bool sync_decode = false;
  bool tg_after_prompt = false;
  std::string json_path;
};

// One sequence of `tokens` (chunk of a longer sequence starting at `start`).
ForwardBatch chunk_batch(const std::vector<int32_t>& tokens, int start, int n_blocks, int block_size) {
  ForwardBatch b;
  b.token_ids = tokens;
  const int n = static_cast<int>(tokens.size());
  for (int i = 0; i < n; ++i) {
    b.positions.push_back(start + i);
    b.slot_mapping.push_back(start + i);
  }
  b.logit_rows = {n - 1};
  for (int i = 0; i < n_blocks; ++i) b.block_tables.push_back(i);
  b.max_blocks_per_seq = n_blocks;
  b.query_start = {0, n};
  b.seq_lens = {start + n};
  return b;
}

Status run_chunk(ModelRunner& r, const std::vector<int32_t>& tokens, int start, int n_blocks, int block_size,
                 std::vector<float>& logits) {
  return r.execute(chunk_batch(tokens, start, n_blocks, block_size), logits);
}

// One greedy decode step from `token` (in: this step's, out: the next) at position `pos`.
Status decode_greedy(ModelRunner& r, bool host_argmax, int32_t& token, int pos, int n_blocks, int block_size,
                     std::vector<float>& logits, std::vector<int32_t>& ids) {
  const ForwardBatch b = chunk_batch({token}, pos, n_blocks, block_size);
  if (!host_argmax) {
    EMBER_RETURN_IF_ERROR(r.execute_argmax(b, ids));
    if (ids.size() != 1) return Status::errorf("decode step {}: {} argmax ids, expected 1", pos, ids.size());
    token = ids[0];
    return Status::ok();
  }
  EMBER_RETURN_IF_ERROR(r.execute(b, logits));
  if (logits.empty()) return Status::errorf("decode step {}: no logits", pos);
  token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  return Status::ok();
}

// Bytes of the checkpoint on disk: the GGUF file, or the safetensors shards of a directory.
uint64_t checkpoint_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return fs::file_size(path, ec);
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".safetensors") total += e.file_size(ec);
  return total;
}

uint64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

// A field of /proc/self/status in bytes (e.g. "RssAnon"); 0 where it is not available.
uint64_t proc_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;  // "kB"
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_speed(const SpeedOptions& o) {
  auto runner = load_runner(o.model);
  if (!runner.is_ok()) {
    fmt::print(stderr, "error: {}\n", runner.message());
    return 1;
  }
  ModelRunner& r = **runner;
  if (Status st = finish_model_load(r, o.model); !st.is_ok()) {  // no tokenizer here
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  const int block_size = 16;
  const int total = o.n_prompt + o.n_gen;
  const int n_blocks = (total + block_size - 1) / block_size;
  if (auto st = r.allocate_kv_cache({n_blocks, block_size}); !st.is_ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tok(100, std::min(r.vocab_size() - 1, 20000));
  std::vector<int32_t> prompt(static_cast<size_t>(o.n_prompt));
  for (auto& t : prompt) t = tok(rng);
  std::vector<float> logits;
  using Clock = std::chrono::steady_clock;
  // Warm-up (page in the weights, size the scratch buffers).
  const std::vector<int32_t> warm_up = prompt.empty() ? std::vector<int32_t>{1}
                                                      : std::vector<int32_t>(prompt.begin(), prompt.begin() + std::min(o.n_prompt, 16));
  if (auto st = run_chunk(r, warm_up, 0, n_blocks, block_size, logits); !st.is_ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  std::vector<double> pp, tg;
  std::vector<int32_t> ids;
  const bool host_argmax = o.host_argmax || !r.can_execute_argmax();
  const bool pipelined = !host_argmax && !o.sync_decode && r.can_pipeline_argmax();
  for (int rep = 0; rep < o.repetitions; ++rep) {
    auto t0 = Clock::now();
    if (o.n_prompt > 0) {
      if (Status st = run_chunk(r, prompt, 0, n_blocks, block_size, logits); !st.is_ok()) {
        fmt::print(stderr, "error: {}\n", st.message());
        return 1;
      }
    }
    auto t1 = Clock::now();
    if (o.n_prompt > 0) pp.push_back(o.n_prompt / std::chrono::duration<double>(t1 - t0).count());
    // Decode from an empty context, as llama-bench's tg does (--tg-after-prompt: after the
    // prompt just processed, so the steps attend to it); each step picks its token as the
    // engine does for a greedy request (the executor's argmax: a GPU returns one id, not the
    // vocabulary's logits; --host-argmax downloads them and takes the argmax here instead).
    // Where the executor queues steps (a GPU), step i + 1 is queued, its token fed from step
    // i's pick on the device, before step i's id is waited for, as the engine's pipelined
    // decode does (--sync-decode: each id back before the next step is queued).
    int32_t next = prompt.empty() ? 1 : prompt.back();
    const int pos0 = o.tg_after_prompt ? o.n_prompt : 0;
    t0 = Clock::now();
    if (pipelined && o.n_gen > 0) {
      ArgmaxPipeline pipe(r);
      const int32_t feed_row0 = 0;
      Status st = pipe.enqueue(chunk_batch({next}, pos0, n_blocks, block_size), {});
      for (int i = 1; st.is_ok() && i <= o.n_gen; ++i) {
        step_profile::begin_step(true, 1, 1);
        const step_profile::Scope wall("step (wall)");
        if (i < o.n_gen) st = pipe.enqueue(chunk_batch({0}, pos0 + i, n_blocks, block_size), {&feed_row0, 1});
        if (st.is_ok()) st = pipe.collect(ids);
        if (st.is_ok() && ids.size() != 1)
          st = Status::errorf("decode step {}: {} argmax ids, expected 1", i - 1, ids.size());
      }
      if (!st.is_ok()) {
        fmt::print(stderr, "error: {}\n", st.message());
        return 1;
      }
    }
    for (int i = 0; !pipelined && i < o.n_gen; ++i) {
      step_profile::begin_step(true, 1, 1);
      const step_profile::Scope wall("step (wall)");
      if (Status st = decode_greedy(r, host_argmax, next, pos0 + i, n_blocks, block_size, logits, ids); !st.is_ok()) {
        fmt::print(stderr, "error: {}\n", st.message());
        return 1;
      }
    }
    t1 = Clock::now();
    if (o.n_gen > 0) tg.push_back(o.n_gen / std::chrono::duration<double>(t1 - t0).count());
    fmt::print(stderr, "bench: repetition {}/{} done\n", rep + 1, o.repetitions);
  }
  nlohmann::json j;
  j["model"] = o.model.model;
  j["threads"] = r.backend().name();
  j["tensor_parallel"] = r.tensor_parallel();
  if (!pp.empty()) {
    j["pp"] = {{"n", o.n_prompt}, {"tokens_per_s", median(pp)}};
    fmt::print("pp{}: {:.2f} tok/s\n", o.n_prompt, median(pp));
  }
  if (step_profile::enabled()) fmt::print(stderr, "{}", step_profile::report());
  if (!tg.empty()) {
    j["tg"] = {{"n", o.n_gen},
               {"tokens_per_s", median(tg)},
               {"argmax", host_argmax ? "host" : "executor"},
               {"pipelined", pipelined},
               {"context_start", o.tg_after_prompt ? o.n_prompt : 0}};
    fmt::print("tg{}: {:.2f} tok/s{}{}{}\n", o.n_gen, median(tg),
               o.tg_after_prompt ? fmt::format(" (after {} prompt tokens)", o.n_prompt) : std::string(),
               host_argmax ? " (argmax on the host)" : "", pipelined ? " (pipelined)" : "");
  }
  // Weights are memory-mapped, so the touched pages of the file count in RSS once; anything
  // above file + KV cache is scratch, tables and copies.
  const uint64_t rss = peak_rss_bytes(), file = checkpoint_bytes(o.model.model);
  const uint64_t kv = r.kv_bytes_per_block(block_size) * static_cast<uint64_t>(n_blocks);
  const double mib = 1024.0 * 1024.0;
  const uint64_t anon = proc_status_bytes("RssAnon"), mapped = proc_status_bytes("RssFile");
  j["memory"] = {{"peak_rss_bytes", rss}, {"file_bytes", file}, {"kv_cache_bytes", kv},
                 {"rss_anon_bytes", anon}, {"rss_file_bytes", mapped}};
  fmt::print("memory: peak RSS {:.1f} MiB = {:.3f} x (file {:.1f} MiB + KV cache {:.1f} MiB)\n", rss / mib,
             file + kv > 0 ? static_cast<double>(rss) / static_cast<double>(file + kv) : 0.0, file / mib, kv / mib);
  fmt::print("memory: now {:.1f} MiB anonymous, {:.1f} MiB of mapped files\n", anon / mib, mapped / mib);
  if (!o.json_path.empty()) std::ofstream(o.json_path) << j.dump(2) << "\n";
  return 0;
}

}  // namespace

CommandFn register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "benchmarks: speed (pp/tg) and throughput (offline serving)");
  cmd->require_subcommand(1);
  auto* speed = cmd->add_subcommand("speed", "prompt processing and decode tokens/s of one sequence");
  auto so = std::make_shared<SpeedOptions>();
  add_model_options(*speed, so->model, false);
  speed->add_option("-p,--n-prompt", so->n_prompt, "prompt tokens (pp)")->check(CLI::Range(0, 1 << 16));
  speed->add_option("-n,--n-gen", so->n_gen, "generated tokens (tg)")->check(CLI::Range(0, 1 << 16));
  speed->add_option("-r,--repetitions", so->repetitions, "repetitions (median reported)")->check(CLI::Range(1, 100));
  speed->add_flag("--host-argmax", so->host_argmax,
                  "decode steps download every logit and take the argmax on the host (by default the executor's "
                  "argmax, as the engine runs a greedy request)");
  speed->add_flag("--sync-decode", so->sync_decode,
                  "wait for each decode step's token before queuing the next (by default a GPU queues step n + 1, "
                  "its token fed from step n's pick on the device, first)");
  speed->add_flag("--tg-after-prompt", so->tg_after_prompt,
                  "decode after the prompt just processed (by default from an empty context, as llama-bench's tg)");
  speed->add_option("--json", so->json_path, "write results as JSON");
  auto* thr = cmd->add_subcommand("throughput", "offline serving throughput through the engine");
  auto to = std::make_shared<ThroughputOptions>();
  add_throughput_options(*thr, *to);
  return [speed, so, to]() { return speed->parsed() ? run_speed(*so) : run_throughput(*to); };
}

}  // namespace ember
