// `ember perplexity -m MODEL -f TEXT [--ctx N] [--stride S]`: perplexity over a text file,
// computed as llama.cpp's llama-perplexity does by default so the two compare directly: the
// text is tokenized once (BOS added as the model's tokenizer does), cut into chunks of --ctx
// tokens whose first token is replaced by BOS (when the tokenizer adds one), and only the second half of each chunk is
// scored (every scored token sees at least ctx/2 tokens of context). --stride S instead
// slides windows of ctx tokens by S and scores the last S tokens of each (HF style).
// --kl-base FILE compares ember's token distributions with saved reference logits
// (a .npy [n_scored, n_vocab] written by --save-logits, here or by another engine).
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "core/npy.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iterator>

namespace ember {

namespace {

struct PplOptions {
  ModelOptions model;
  std::string file;
  int ctx = 512;
  int stride = 0;
  int max_chunks = 0;
  std::string kl_base;
  std::string save_logits;
};

struct Window {
  int begin;        // first token of the window in the text
  int first_scored; // index within the window of the first logit row scored
};

// log-softmax of one row into out; returns the row's log-sum-exp.
double log_softmax(const float* logits, int n, std::vector<double>& out) {
  double mx = logits[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(logits[i] - mx);
  const double lse = mx + std::log(sum);
  out.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = logits[i] - lse;
  return lse;
}

int run(const PplOptions& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) {
    fmt::print(stderr, "error: cannot read {}\n", o.file);
    return 1;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ModelOptions mo = o.model;
  auto runner = load_runner(mo);
  if (!runner.is_ok()) {
    fmt::print(stderr, "error: {}\n", runner.message());
    return 1;
  }
  auto tok = load_tokenizer((*runner)->source());
  if (!tok.is_ok()) {
    fmt::print(stderr, "error: perplexity needs the model's tokenizer: {}\n", tok.message());
    return 1;
  }
  if (Status st = finish_model_load(**runner, mo); !st.is_ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  const auto tokens = (*tok)->encode(text, true);
  const int n_tok = static_cast<int>(tokens.size());
  const int ctx = o.ctx;
  if (ctx < 8 || ctx > (*runner)->max_context()) {
    fmt::print(stderr, "error: --ctx {} must be in [8, {}]\n", ctx, (*runner)->max_context());
    return 2;
  }
  std::vector<Window> windows;
  if (o.stride > 0) {
    if (o.stride > ctx) {
      fmt::print(stderr, "error: --stride {} must not exceed --ctx {}\n", o.stride, ctx);
      return 2;
    }
    for (int b = 0; b + ctx <= n_tok; b += o.stride) windows.push_back({b, b == 0 ? 0 : ctx - o.stride - 1});
  } else {
    for (int b = 0; b + ctx <= n_tok; b += ctx) windows.push_back({b, ctx / 2});
  }
  if (o.max_chunks > 0 && static_cast<int>(windows.size()) > o.max_chunks) windows.resize(static_cast<size_t>(o.max_chunks));
  if (windows.empty()) {
    fmt::print(stderr, "error: {} tokens are fewer than one context of {}\n", n_tok, ctx);
    return 2;
  }
  const int block_size = 16;
  const int n_blocks = (ctx + block_size - 1) / block_size;
  if (auto st = (*runner)->allocate_kv_cache({n_blocks, block_size}); !st.is_ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  const int vocab = (*runner)->vocab_size();
  std::optional<NpyArray> kl_ref;
  if (!o.kl_base.empty()) {
    auto r = read_npy(o.kl_base);
    if (!r.is_ok() || r->shape.size() != 2 || r->shape[1] != vocab) {
      fmt::print(stderr, "error: --kl-base {}: {}\n", o.kl_base, r.is_ok() ? "expected [n_scored, n_vocab] logits" : r.message());
      return 1;
    }
    kl_ref = std::move(*r);
  }
  std::vector<float> saved;
  // llama.cpp puts BOS at the start of each chunk only for models whose tokenizer adds it
  // (Llama, Gemma); Qwen2 defines a BOS id but never adds it, so its chunks stay as they are.
  const auto& prefix = (*tok)->special_prefix();
  const std::optional<int32_t> bos =
      !prefix.empty() && prefix.front() == (*tok)->bos_id() ? (*tok)->bos_id() : std::nullopt;
  double nll = 0, kl_sum = 0;
  int64_t n_scored = 0, top1_same = 0;
  std::vector<double> lp, lp_ref;
  ProgressBar bar("perplexity", static_cast<int64_t>(windows.size()));
  std::vector<float> logits;
  for (size_t w = 0; w < windows.size(); ++w) {
    const Window& win = windows[w];
    ForwardBatch b;
    b.token_ids.assign(tokens.begin() + win.begin, tokens.begin() + win.begin + ctx);
    if (o.stride == 0 && bos) b.token_ids[0] = *bos;
    for (int i = 0; i < ctx; ++i) {
      b.positions.push_back(i);
      b.slot_mapping.push_back(i);
      if (i >= win.first_scored && i < ctx - 1) b.logit_rows.push_back(i);
    }
    for (int i = 0; i < n_blocks; ++i) b.block_tables.push_back(i);
    b.max_blocks_per_seq = n_blocks;
    b.query_start = {0, ctx};
    b.seq_lens = {ctx};
    if (auto st = (*runner)->execute(b, logits); !st.is_ok()) {
      fmt::print(stderr, "error: {}\n", st.message());
      return 1;
    }
    for (size_t r = 0; r < b.logit_rows.size(); ++r) {
      const float* row = &logits[r * static_cast<size_t>(vocab)];
      const int target = tokens[static_cast<size_t>(win.begin + b.logit_rows[r] + 1)];
      log_softmax(row, vocab, lp);
      nll -= lp[static_cast<size_t>(target)];
      if (!o.save_logits.empty()) saved.insert(saved.end(), row, row + vocab);
      if (kl_ref && n_scored < kl_ref->shape[0]) {
        log_softmax(&kl_ref->data[static_cast<size_t>(n_scored) * vocab], vocab, lp_ref);
        double kl = 0;
        size_t arg = 0, arg_ref = 0;
        for (size_t i = 0; i < lp.size(); ++i) {
          kl += std::exp(lp_ref[i]) * (lp_ref[i] - lp[i]);
          if (lp[i] > lp[arg]) arg = i;
          if (lp_ref[i] > lp_ref[arg_ref]) arg_ref = i;
        }
        kl_sum += kl;
        top1_same += arg == arg_ref;
      }
      ++n_scored;
    }
    bar.update(static_cast<int64_t>(w + 1), fmt::format("ppl {:.4f}", std::exp(nll / std::max<int64_t>(n_scored, 1))));
  }
  bar.finish();
  const double ppl = std::exp(nll / static_cast<double>(n_scored));
  fmt::print("tokens: {}  chunks: {}  ctx: {}  scored: {}\n", n_tok, windows.size(), ctx, n_scored);
  fmt::print("perplexity: {:.4f}\n", ppl);
  if (kl_ref) {
    const int64_t n_kl = std::min<int64_t>(n_scored, kl_ref->shape[0]);
    fmt::print("kl-divergence: {:.6f} (mean over {} tokens), same top-1: {:.2f}%\n", kl_sum / n_kl, n_kl,
               100.0 * top1_same / n_kl);
  }
  if (!o.save_logits.empty()) {
    if (auto st = write_npy_f32(o.save_logits, saved.data(), {n_scored, vocab}); !st.is_ok()) {
      fmt::print(stderr, "error: {}\n", st.message());
      return 1;
    }
  }
  return 0;
}

}  // namespace

CommandFn register_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "perplexity of a model over a text file");
  auto o = std::make_shared<PplOptions>();
  add_model_options(*cmd, o->model, false);
  cmd->add_option("-f,--file", o->file, "text file")->required();
  cmd->add_option("-c,--ctx", o->ctx, "tokens per chunk (default 512)");
  cmd->add_option("--stride", o->stride, "slide windows by S tokens (default: llama.cpp chunks)");
  cmd->add_option("--chunks", o->max_chunks, "score at most this many chunks");
  cmd->add_option("--kl-base", o->kl_base, "reference logits .npy for KL divergence");
  cmd->add_option("--save-logits", o->save_logits, "write the scored rows' logits as .npy");
  return [o]() { return run(*o); };
}

}  // namespace ember
