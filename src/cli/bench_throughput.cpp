#include "cli/bench_throughput.h"

#include "cli/progress.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <fstream>
#include <map>
#include <random>

namespace ember {

namespace {

using Clock = std::chrono::steady_clock;

struct Tracked {
  Clock::time_point added;
  Clock::time_point last_token;
  bool got_first = false;
  int tokens = 0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(idx);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

int spread(std::mt19937_64& rng, int len, double f) {
  if (f <= 0) return len;
  std::uniform_int_distribution<int> d(std::max(1, static_cast<int>(len * (1 - f))), static_cast<int>(len * (1 + f)));
  return d(rng);
}

}  // namespace

void add_throughput_options(CLI::App& cmd, ThroughputOptions& o) {
  add_model_options(cmd, o.model);
  cmd.add_option("--num-requests", o.num_requests, "requests in total")->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--concurrency", o.concurrency, "requests in flight at once")->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--input-len", o.input_len, "prompt tokens")->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--output-len", o.output_len, "generated tokens")->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--len-spread", o.len_spread, "length spread F: uniform in [L(1-F), L(1+F)]")->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--shared-prefix-len", o.shared_prefix_len, "common prompt prefix tokens")->check(CLI::Range(0, 1 << 20));
  cmd.add_option("--seed", o.seed, "workload seed");
  cmd.add_option("--temperature", o.temperature, "sampling temperature of every request (0: greedy)")->check(CLI::Range(0.0, 100.0));
  cmd.add_option("--top-p", o.top_p, "nucleus sampling of every request")->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--json", o.json_path, "write results as JSON");
}

int run_throughput(const ThroughputOptions& o) {
  auto runner = load_runner(o.model);
  if (!runner.is_ok()) {
    fmt::print(stderr, "error: {}\n", runner.message());
    return 1;
  }
  if (Status st = finish_model_load(**runner, o.model); !st.is_ok()) {  // random token ids: no tokenizer
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  const int vocab = (*runner)->vocab_size();
  auto engine_r = make_engine(std::move(*runner), o.model, {});
  if (!engine_r.is_ok()) {
    fmt::print(stderr, "error: {}\n", engine_r.message());
    return 1;
  }
  LlmEngine& engine = **engine_r;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> tok(10, std::max(11, std::min(vocab - 1, 30000)));
  std::vector<int32_t> prefix(static_cast<size_t>(o.shared_prefix_len));
  for (auto& t : prefix) t = tok(rng);
  std::deque<EngineRequest> pending;
  int64_t total_prompt = 0;
  for (int i = 0; i < o.num_requests; ++i) {
    EngineRequest r;
    r.request_id = fmt::format("bench-{}", i);
    r.prompt_token_ids = prefix;
    const int len = spread(rng, o.input_len, o.len_spread);
    for (int t = 0; t < len; ++t) r.prompt_token_ids.push_back(tok(rng));
    r.params.temperature = o.temperature;  // greedy by default
    r.params.top_p = o.top_p;
    r.params.seed = o.seed * 1000003 + static_cast<uint64_t>(i);
    r.params.ignore_eos = true;
    r.params.max_tokens = spread(rng, o.output_len, o.len_spread);
    total_prompt += static_cast<int64_t>(r.prompt_token_ids.size());
    pending.push_back(std::move(r));
  }
  std::map<std::string, Tracked> live;
  std::vector<double> ttft_ms, itl_ms, e2e_ms;
  double unused_sum = 0;
  int64_t unused_steps = 0, total_out = 0;
  int done = 0;
  ProgressBar bar("throughput", o.num_requests);
  const auto t_start = Clock::now();
  while (done < o.num_requests) {
    while (!pending.empty() && static_cast<int>(live.size()) < o.concurrency) {
      EngineRequest r = std::move(pending.front());
      pending.pop_front();
      const std::string id = r.request_id;
      if (auto st = engine.add_request(std::move(r)); !st.is_ok()) {
        fmt::print(stderr, "error: {}\n", st.message());
        return 1;
      }
      live[id] = Tracked{Clock::now(), {}, false, 0};
    }
    auto outs = engine.step();
    const auto now = Clock::now();
    const auto stats = engine.stats();
    if (stats.kv_slots_allocated > 0) {
      unused_sum += stats.kv_unused_fraction;
      ++unused_steps;
    }
    for (const auto& out : outs) {
      auto it = live.find(out.request_id);
      if (it == live.end()) continue;
      Tracked& t = it->second;
      for (size_t k = 0; k < out.new_token_ids.size(); ++k) {
        if (!t.got_first) {
          ttft_ms.push_back(std::chrono::duration<double, std::milli>(now - t.added).count());
          t.got_first = true;
        } else {
          itl_ms.push_back(std::chrono::duration<double, std::milli>(now - t.last_token).count());
        }
        t.last_token = now;
        ++t.tokens;
      }
      if (out.finished) {
        if (!out.error.empty()) {
          fmt::print(stderr, "error: request {} failed: {}\n", out.request_id, out.error);
          return 1;
        }
        e2e_ms.push_back(std::chrono::duration<double, std::milli>(now - t.added).count());
        total_out += t.tokens;
        live.erase(it);
        ++done;
        bar.update(done);
      }
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t_start).count();
  bar.finish();
  const auto stats = engine.stats();
  nlohmann::json j = {
      {"num_requests", o.num_requests}, {"concurrency", o.concurrency}, {"input_len", o.input_len},
      {"output_len", o.output_len}, {"len_spread", o.len_spread}, {"shared_prefix_len", o.shared_prefix_len},
      {"prefix_cache", !o.model.no_prefix_cache}, {"tensor_parallel", o.model.tensor_parallel}, {"elapsed_s", secs},
      {"requests_per_s", o.num_requests / secs}, {"output_tokens_per_s", total_out / secs},
      {"total_tokens_per_s", (total_out + total_prompt) / secs},
      {"mean_ttft_ms", mean(ttft_ms)}, {"p50_ttft_ms", percentile(ttft_ms, 50)}, {"p99_ttft_ms", percentile(ttft_ms, 99)},
      {"mean_itl_ms", mean(itl_ms)}, {"p99_itl_ms", percentile(itl_ms, 99)},
      {"mean_e2e_ms", mean(e2e_ms)}, {"p99_e2e_ms", percentile(e2e_ms, 99)},
      {"kv_unused_fraction", unused_steps ? unused_sum / unused_steps : 0.0},
      {"prefix_cache_hit_rate", stats.prefix_cache_hit_rate}, {"preemptions", stats.num_preemptions},
      {"kv_blocks_total", stats.kv_blocks_total}};
  fmt::print("{:<24} {:>12}\n", "metric", "value");
  for (const char* k : {"requests_per_s", "output_tokens_per_s", "total_tokens_per_s", "mean_ttft_ms", "p50_ttft_ms",
                        "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2e_ms", "kv_unused_fraction",
                        "prefix_cache_hit_rate", "preemptions"})
    fmt::print("{:<24} {:>12.4f}\n", k, j[k].get<double>());
  if (stats.spec_draft_tokens > 0) {
    j["spec_draft_tokens"] = stats.spec_draft_tokens;
    j["spec_accepted_tokens"] = stats.spec_accepted_tokens;
    fmt::print("{:<24} {:>12}\n{:<24} {:>12}\n", "spec_draft_tokens", stats.spec_draft_tokens, "spec_accepted_tokens",
               stats.spec_accepted_tokens);
  }
  // CUDA graphs the run left captured (batch sizes x block-table widths; device memory each).
  if (const auto* mr = dynamic_cast<const ModelRunner*>(&engine.executor()); mr && mr->num_cuda_graphs() > 0) {
    j["decode_graphs"] = mr->num_cuda_graphs();
    fmt::print("{:<24} {:>12}\n", "decode_graphs", mr->num_cuda_graphs());
  }
  if (!o.json_path.empty()) std::ofstream(o.json_path) << j.dump(2) << "\n";
  return 0;
}

}  // namespace ember
