#include "runner/model_runner.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_rank_group.h"
#include "core/thread_pool.h"
#include "core/log.h"
#include "core/step_profile.h"
#include "runner/decode_graph_shape.h"
#ifdef EMBER_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace ember {

Status ModelRunner::finish_load(const std::function<void(size_t, size_t)>& progress) {
  source_->release_metadata();
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  // After the metadata is gone, so the copy never coexists with the vocabulary JSON.
  if (make_resident_) EMBER_RETURN_IF_ERROR(source_->make_resident(progress));
  return Status::ok();
}

Result<DType> parse_kv_dtype(const std::string& name) {
  if (name == "f32" || name == "auto") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  if (name == "int8" || name == "i8") return DType::I8;
  if (name == "fp8" || name == "fp8_e4m3") return DType::FP8_E4M3;
  if (name == "fp8_e5m2") return DType::FP8_E5M2;
  return Status::errorf("unknown KV cache dtype '{}' (f32, f16, bf16, int8, fp8_e4m3, fp8_e5m2)", name);
}

namespace {

// Rank `rank` of the options' device: cuda:N onwards for tensor parallel ranks; CPU ranks
// split the threads.
Result<std::unique_ptr<Backend>> make_backend(const RunnerOptions& o, const ShardSpec& shard,
                                              const std::shared_ptr<cpu::CpuRankGroup>& cpu_group) {
  if (o.device == "cpu") {
    if (!shard.active()) return make_cpu_backend(o.n_threads, o.batch_invariant);
    const int total = o.n_threads > 0 ? o.n_threads : ThreadPool::default_threads();
    return make_cpu_backend(std::max(1, total / shard.size), o.batch_invariant, cpu_group, shard.rank);
  }
  if (o.batch_invariant) return Status::error("batch-invariant mode exists on the CPU backend only");
  if (o.device.rfind("cuda", 0) == 0) {
#ifdef EMBER_HAVE_CUDA
    const int index = o.device.size() > 5 ? std::atoi(o.device.c_str() + 5) : 0;
    return create_cuda_backend(index + shard.rank);
#else
    return Status::error("this ember was built without CUDA (configure with -DEMBER_CUDA=ON)");
#endif
  }
  return Status::errorf("unknown device '{}' (cpu, cuda, cuda:N)", o.device);
}

#ifdef EMBER_HAVE_CUDA
constexpr int kMaxGraphBatch = 512;                  // decode batch sizes captured in graphs
// Batch sizes warm_up captures by default: the interactive ones. All 256 took 5 s and 1.3 GB
// at Llama-3-8B shapes and cost 256 x 1000/1000 0.8% (H200, session 25), whose block tables
// are past the warm-up's width anyway.
constexpr int kDefaultWarmUpGraphs = 16;
constexpr size_t kGpuReserveBytes = size_t{1} << 30;  // workspaces, cuBLASLt, graphs

// One new token per sequence, every row's logits in order: a decode step a graph can replay.
bool is_decode_batch(const ForwardBatch& b) {
  const int n = b.n_seqs();
  if (n == 0 || n > kMaxGraphBatch || b.n_tokens() != n || static_cast<int>(b.logit_rows.size()) != n ||
      static_cast<int>(b.query_start.size()) != n + 1 ||
      b.block_tables.size() != static_cast<size_t>(n) * static_cast<size_t>(b.max_blocks_per_seq))
    return false;
  for (int i = 0; i < n; ++i)
    if (b.query_start[i] != i || b.logit_rows[i] != i) return false;
  return b.query_start[n] == n;
}

// The registered host arrays belong to one execute call only.
struct ClearStepMetadata {
  CudaStep* c;
  ~ClearStepMetadata() { c->clear_step_metadata(); }
};

// (feed, when not empty, goes last: the other arrays keep the addresses graphs captured)
std::vector<HostArray> step_arrays(const ForwardBatch& b, const std::vector<int32_t>& feed) {
  auto arr = [](const std::vector<int32_t>& v) { return HostArray{v.data(), v.size() * sizeof(int32_t)}; };
  std::vector<HostArray> a = {arr(b.token_ids), arr(b.positions),    arr(b.slot_mapping), arr(b.query_start),
                              arr(b.seq_lens),  arr(b.block_tables), arr(b.logit_rows)};
  if (!feed.empty()) a.push_back(arr(feed));
  return a;
}
#endif

}  // namespace

Result<std::unique_ptr<ModelRunner>> ModelRunner::load(const std::string& path, const RunnerOptions& o) {
  const int n_ranks = o.tensor_parallel;
  if (n_ranks < 1 || n_ranks > 64) return Status::errorf("tensor parallel size {} is not in [1, 64]", n_ranks);
  if (n_ranks > 1 && o.device != "cpu" && o.device.rfind("cuda", 0) != 0)
    return Status::errorf("unknown device '{}' (cpu, cuda, cuda:N)", o.device);
  std::shared_ptr<WeightSource> source;
  EMBER_ASSIGN_OR_RETURN(source, WeightSource::open(path));
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  r->source_ = source;
  r->make_resident_ = !o.mmap && o.device == "cpu";
  for (int rank = 1; rank < n_ranks; ++rank) {
    r->peers_.emplace_back(new ModelRunner());
    r->peers_.back()->source_ = source;
  }
  if (n_ranks > 1) r->rank_threads_ = std::make_unique<RankThreads>(n_ranks);
  std::shared_ptr<cpu::CpuRankGroup> cpu_group;
  if (n_ranks > 1 && o.device == "cpu") cpu_group = std::make_shared<cpu::CpuRankGroup>(n_ranks);
  // Each rank loads on its own thread (a CUDA rank's device is current there), in parallel.
  EMBER_RETURN_IF_ERROR(r->on_all_ranks(
      [&](ModelRunner& m, int rank) { return m.init_rank(o, ShardSpec{rank, n_ranks}, cpu_group); }));
#ifdef EMBER_HAVE_CUDA
  if (n_ranks > 1 && r->cuda_) {
    std::vector<Backend*> backends{r->backend_.get()};
    for (auto& p : r->peers_) backends.push_back(p->backend_.get());
    EMBER_RETURN_IF_ERROR(join_cuda_tensor_parallel(backends));
  }
#endif
  return r;
}

ModelRunner::~ModelRunner() {
  if (!rank_threads_) return;
  // Each rank tears its state down on its own thread, all at once: its device is current
  // there, and an NCCL communicator's destruction may wait for the group's other ranks.
  (void)on_all_ranks([](ModelRunner& m, int) {
    m.kv_ = KvStorage{};
    m.model_.reset();
    m.backend_.reset();
    return Status::ok();
  });
}

Status ModelRunner::init_rank(const RunnerOptions& o, const ShardSpec& shard,
                              const std::shared_ptr<cpu::CpuRankGroup>& cpu_group) {
  EMBER_ASSIGN_OR_RETURN(backend_, make_backend(o, shard, cpu_group));
  bool weight_format_set = o.weight_format == "auto";
#ifdef EMBER_HAVE_CUDA
  if (CudaStep* cs = cuda_step(*backend_)) {
    EMBER_RETURN_IF_ERROR(cs->set_weight_format(o.weight_format));
    weight_format_set = true;
  }
#endif
  if (!weight_format_set)
    return Status::errorf("weight format '{}' needs a CUDA device (--device cuda)", o.weight_format);
  ModelLoadOptions lo;
  if (shard.rank == 0) lo.progress = o.progress;
  lo.shard = shard;
  EMBER_ASSIGN_OR_RETURN(model_, Model::load(*source_, *backend_, lo));
  kv_dtype_ = o.kv_dtype;
  // Greedy steps pick their tokens on the backend (no logits copied out; rows in parallel).
  device_argmax_ = backend_->device() == Device::CPU;
#ifdef EMBER_HAVE_CUDA
  if (backend_->device() == Device::CUDA) {
    cuda_ = cuda_step(*backend_);
    const char* env = std::getenv("EMBER_CUDA_GRAPHS");
    graphs_ = cuda_ && o.cuda_graphs && !(env && std::strcmp(env, "0") == 0);
    const char* pad = std::getenv("EMBER_CUDA_GRAPH_PAD");  // 0: a graph for every batch size
    graph_pad_ = !(pad && std::strcmp(pad, "0") == 0);
    graph_epoch_ = model_->activation_epoch();
    // (Final soft-capping is applied to the logits on the device, in the forward pass.)
    const char* gs = std::getenv("EMBER_GPU_SAMPLE");
    device_argmax_ = cuda_ && !(gs && std::strcmp(gs, "0") == 0);
    const char* gr = std::getenv("EMBER_GPU_SAMPLE_ROWS");  // 0: sampled (non-greedy) steps on the host
    device_sample_ = device_argmax_ && !(gr && std::strcmp(gr, "0") == 0);
  }
#endif
  return Status::ok();
}

Status ModelRunner::on_all_ranks(const std::function<Status(ModelRunner&, int)>& fn) {
  if (peers_.empty()) return fn(*this, 0);
  return rank_threads_->run([&](int r) { return fn(r == 0 ? *this : *peers_[static_cast<size_t>(r - 1)], r); });
}

Status ModelRunner::with_peers(const ForwardBatch& batch, const std::function<Status()>& own) {
  if (peers_.empty()) return own();
  return rank_threads_->run([&](int r) {
    if (r == 0) return own();
    ModelRunner& p = *peers_[static_cast<size_t>(r - 1)];
    return p.execute_local(batch, p.peer_logits_);
  });
}

size_t ModelRunner::kv_bytes_per_block(int block_size) const {
  return model_->kv_bytes_per_block(block_size, kv_dtype_);
}

Status ModelRunner::allocate_kv_cache(const KvCacheConfig& cfg) {
  return on_all_ranks([&](ModelRunner& r, int) { return r.allocate_kv_local(cfg); });
}

Status ModelRunner::allocate_kv_local(const KvCacheConfig& cfg) {
#ifdef EMBER_HAVE_CUDA
  if (cuda_) cuda_->make_current();
#endif
  EMBER_ASSIGN_OR_RETURN(kv_, model_->allocate_kv(cfg.n_blocks, cfg.block_size, kv_dtype_));
  return Status::ok();
}

#ifdef EMBER_HAVE_CUDA
namespace {
// A step of n sequences with one token each at position 0 (decode-shaped when tokens == 1,
// else one prompt of `tokens` tokens in sequence 0 and n == 1), K/V in blocks 0.. (mod
// n_blocks). Only for warm-up: it writes garbage into those blocks.
ForwardBatch warm_up_batch(int n, int tokens, int n_blocks, int block_size) {
  ForwardBatch b;
  const int blocks = (tokens + block_size - 1) / block_size;
  b.max_blocks_per_seq = blocks;
  b.query_start.push_back(0);
  for (int s = 0; s < n; ++s) {
    for (int t = 0; t < tokens; ++t) {
      b.token_ids.push_back(0);
      b.positions.push_back(t);
      const int block = (s * blocks + t / block_size) % n_blocks;
      b.slot_mapping.push_back(block * block_size + t % block_size);
    }
    for (int j = 0; j < blocks; ++j) b.block_tables.push_back((s * blocks + j) % n_blocks);
    b.query_start.push_back(b.query_start.back() + tokens);
    b.seq_lens.push_back(tokens);
    b.logit_rows.push_back(b.query_start.back() - 1);
  }
  return b;
}
}  // namespace
#endif

Status ModelRunner::warm_up(const WarmUpOptions& o) {
#ifdef EMBER_HAVE_CUDA
  if (!cuda_) return Status::ok();
  if (kv_.layers.empty()) return Status::error("warm_up before allocate_kv_cache");
  if (o.max_tokens < 1 || o.max_seqs < 1)
    return Status::errorf("warm_up: step limits {} tokens, {} sequences", o.max_tokens, o.max_seqs);
  const auto t0 = std::chrono::steady_clock::now();
  const Result<GpuMemoryInfo> mem0 = cuda_->memory_info();
  // Decode steps may now run in the graph of a larger batch, up to the limits the buffers
  // are sized for here.
  const int pad_cap = std::min({o.max_seqs, o.max_tokens, kMaxGraphBatch});
  EMBER_RETURN_IF_ERROR(on_all_ranks([&](ModelRunner& r, int) {
    r.cuda_->make_current();
    r.graph_pad_cap_ = r.graph_pad_ ? pad_cap : 0;
    return r.model_->reserve_activations(o.max_tokens, o.max_seqs);
  }));
  std::vector<int32_t> ids;
  std::vector<float> logits;
  auto run = [&](const ForwardBatch& b) { return device_argmax_ ? execute_argmax(b, ids) : execute(b, logits); };
  // The largest prompt step first: its workspaces (converted activations, split-K partials,
  // attention scratch) then never grow under a request, which would drop the graphs below.
  const int prompt = std::min({o.max_tokens, kv_.n_blocks * kv_.block_size, max_context()});
  EMBER_RETURN_IF_ERROR(run(warm_up_batch(1, prompt, kv_.n_blocks, kv_.block_size)).with_context("warm-up prompt step"));
  int graph_seqs = o.graph_seqs < 0 ? kDefaultWarmUpGraphs : o.graph_seqs;
  graph_seqs = graphs_ ? std::min({graph_seqs, o.max_seqs, kMaxGraphBatch}) : 0;
  // The graphs steps of 1..graph_seqs sequences run in (padded sizes past 16).
  const std::vector<int> sizes = decode_graph_sizes(graph_seqs, graph_pad_cap_);
  const int n_sizes = static_cast<int>(sizes.size());
  // An eager step of every batch size first, then the captures: the sizes do not need the
  // same workspaces (small batches split the decode attention over the keys, into a buffer
  // larger ones never use), and growing one drops every graph captured before.
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < n_sizes; ++i) {
      const int n = sizes[static_cast<size_t>(i)];
      const ForwardBatch b = warm_up_batch(n, 1, kv_.n_blocks, kv_.block_size);
      EMBER_RETURN_IF_ERROR(run(b).with_context(fmt::format("warm-up decode step of {} sequences", n)));
      if (o.progress) o.progress(pass * n_sizes + i + 1, 2 * n_sizes);
    }
  if (cuda_->num_graphs() < sizes.size())
    EMBER_LOG_WARN("cuda: warm-up kept {} of {} decode graphs", cuda_->num_graphs(), sizes.size());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Result<GpuMemoryInfo> mem1 = cuda_->memory_info();
  const double used_mib = mem0.is_ok() && mem1.is_ok()
                              ? (static_cast<double>(mem0->free_bytes) - static_cast<double>(mem1->free_bytes)) / 1048576.0
                              : 0.0;
  EMBER_LOG_INFO("cuda: warmed up in {:.2f}s: activations for {} tokens / {} sequences, a {}-token prompt step, {} "
                 "decode graphs; {:.0f} MiB of device memory taken",
                 secs, o.max_tokens, o.max_seqs, prompt, cuda_->num_graphs(), used_mib);
  return Status::ok();
#else
  (void)o;
  return Status::ok();
#endif
}

Status ModelRunner::execute(const ForwardBatch& batch, std::vector<float>& logits) {
  if (kv_.layers.empty()) return Status::error("execute before allocate_kv_cache");
  return with_peers(batch, [&] { return execute_local(batch, logits); });
}

Status ModelRunner::execute_argmax(const ForwardBatch& batch, std::vector<int32_t>& token_ids) {
  if (kv_.layers.empty()) return Status::error("execute before allocate_kv_cache");
  if (!device_argmax_) return Status::error("execute_argmax: not available on this runner");
  return with_peers(batch, [&] { return execute_argmax_local(batch, token_ids); });
}

Status ModelRunner::execute_sample(const ForwardBatch& batch, const std::vector<DeviceSampleSpec>& rows,
                                   std::vector<DeviceSampled>& out) {
  if (kv_.layers.empty()) return Status::error("execute before allocate_kv_cache");
  if (!device_sample_) return Status::error("execute_sample: not available on this runner");
  return with_peers(batch, [&] { return execute_sample_local(batch, rows, out); });
}

Status ModelRunner::execute_local(const ForwardBatch& batch, std::vector<float>& logits) {
  if (kv_.layers.empty()) return Status::error("execute before allocate_kv_cache");
  if (cuda_) return execute_cuda(batch, logits);
  return model_->forward(batch, kv_, logits);
}

Result<size_t> ModelRunner::device_kv_budget(double utilization, int max_tokens, int max_seqs) {
  // Every rank's cache holds the same blocks: the smallest budget.
  std::vector<size_t> budgets(peers_.size() + 1);
  EMBER_RETURN_IF_ERROR(on_all_ranks([&](ModelRunner& r, int rank) -> Status {
    EMBER_ASSIGN_OR_RETURN(budgets[static_cast<size_t>(rank)], r.device_kv_budget_local(utilization, max_tokens, max_seqs));
    return Status::ok();
  }));
  return *std::min_element(budgets.begin(), budgets.end());
}

Result<size_t> ModelRunner::device_kv_budget_local(double utilization, int max_tokens, int max_seqs) {
#ifdef EMBER_HAVE_CUDA
  if (cuda_) {
    cuda_->make_current();
    if (!(utilization > 0.0 && utilization <= 1.0))
      return Status::errorf("GPU memory utilization {} is not in (0, 1]", utilization);
    EMBER_ASSIGN_OR_RETURN(GpuMemoryInfo mem, cuda_->memory_info());
    const size_t act = model_->activation_bytes(max_tokens, max_seqs);
    const double budget = utilization * static_cast<double>(mem.free_bytes) -
                          static_cast<double>(act + kGpuReserveBytes);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (budget < static_cast<double>(kv_bytes_per_block(16)))
      return Status::errorf("no GPU memory left for the KV cache: {:.2f} of {:.2f} GiB free, {:.2f} GiB "
                            "reserved for activations and workspaces",
                            mem.free_bytes / gib, mem.total_bytes / gib, (act + kGpuReserveBytes) / gib);
    EMBER_LOG_INFO("KV cache: {:.2f} GiB ({} of {:.2f} GiB free after the weights, less {:.2f} GiB for "
                   "activations and workspaces)", budget / gib, utilization, mem.free_bytes / gib,
                   (act + kGpuReserveBytes) / gib);
    return static_cast<size_t>(budget);
  }
#endif
  (void)utilization;
  (void)max_tokens;
  (void)max_seqs;
  return Status::error("device_kv_budget: not a GPU runner");
}

size_t ModelRunner::num_cuda_graphs() const {
#ifdef EMBER_HAVE_CUDA
  if (cuda_) return cuda_->num_graphs();
#endif
  return 0;
}

#ifdef EMBER_HAVE_CUDA

void ModelRunner::sync_activation_epoch() {
  if (model_->activation_epoch() == graph_epoch_) return;
  cuda_->drop_graphs();  // they point into the old activation buffers
  graph_state_.clear();
  graph_epoch_ = model_->activation_epoch();
}

std::pair<int, int> ModelRunner::decode_graph_shape(const ForwardBatch& batch) const {
  return {padded_decode_seqs(batch.n_seqs(), graph_pad_cap_), decode_width_bucket(batch.max_blocks_per_seq)};
}

namespace {
// The first `rows` rows of a step's logits (the rest belong to padding sequences).
Tensor first_rows(Tensor t, int rows) {
  if (t.valid() && t.n_dims >= 1 && t.shape[0] > rows) t.shape[0] = rows;
  return t;
}
}  // namespace

Result<Tensor> ModelRunner::run_decode_graph(const ForwardBatch& batch) {
  const int real = batch.n_seqs();
  const auto [n, w] = decode_graph_shape(batch);
  // Padding sequences (real..n-1): one token 0 at position 0 whose K/V is not stored (slot
  // -1), attending to one key of block 0, its logit row computed and not returned. Rows never
  // mix in a forward pass, so whatever that key holds stays in the padding rows.
  const size_t pad = static_cast<size_t>(n - real);
  auto padded = [&](std::vector<int32_t>& dst, const std::vector<int32_t>& src, auto value) {
    dst.assign(src.begin(), src.end());
    for (size_t i = 0; i < pad; ++i) dst.push_back(value(static_cast<int32_t>(real + i)));
  };
  padded(padded_.token_ids, batch.token_ids, [](int32_t) { return 0; });
  padded(padded_.positions, batch.positions, [](int32_t) { return 0; });
  padded(padded_.slot_mapping, batch.slot_mapping, [](int32_t) { return -1; });
  padded(padded_.query_start, batch.query_start, [](int32_t i) { return i + 1; });
  padded(padded_.seq_lens, batch.seq_lens, [](int32_t) { return 1; });
  padded(padded_.logit_rows, batch.logit_rows, [](int32_t i) { return i; });
  padded_.max_blocks_per_seq = w;
  padded_.block_tables.assign(static_cast<size_t>(n) * static_cast<size_t>(w), 0);
  for (int s = 0; s < real; ++s)
    std::memcpy(padded_.block_tables.data() + static_cast<size_t>(s) * w,
                batch.block_tables.data() + static_cast<size_t>(s) * batch.max_blocks_per_seq,
                sizeof(int32_t) * static_cast<size_t>(batch.max_blocks_per_seq));
  const uint64_t key = decode_graph_key(n, w);

  sync_activation_epoch();
  cuda_->set_step_metadata(step_arrays(padded_, feed_));
  EMBER_RETURN_IF_ERROR(apply_feed(padded_));
  if (cuda_->launch_graph(key)) return first_rows(graph_state_[key].logits, real);
  // Decode attention plans for the longest sequence this width allows, so the graph stays
  // right as sequences grow (the warm-up step plans the same, so buffers are sized for it).
  cuda_->set_decode_kv_bound(w * kv_.block_size);
  struct ResetBound {
    CudaStep* c;
    ~ResetBound() { c->set_decode_kv_bound(0); }
  } reset{cuda_};
  GraphState& st = graph_state_[key];
  if (st.warm && !st.failed) {
    EMBER_RETURN_IF_ERROR(cuda_->begin_capture());
    auto r = model_->enqueue_forward(padded_, kv_);
    const Status cs = cuda_->end_capture(key);
    if (!r.is_ok()) return r.status();
    if (cs.is_ok() && cuda_->launch_graph(key)) {
      st.logits = *r;
      st.captured = true;
      return first_rows(*r, real);
    }
    EMBER_LOG_WARN("cuda: decode graph for batch {} not used: {}", n, cs.is_ok() ? "launch failed" : cs.message());
    st.failed = true;
  }
  auto r = model_->enqueue_forward(padded_, kv_);  // eager (nothing ran during a capture)
  if (!r.is_ok()) return r;
  sync_activation_epoch();  // this step may have moved the activation buffers
  graph_state_[key].warm = true;
  return first_rows(*r, real);
}

Status ModelRunner::apply_feed(const ForwardBatch& batch) {
  if (feed_.empty()) return Status::ok();
  return cuda_->feed_tokens(batch.token_ids.data(), feed_.data(), static_cast<int>(feed_.size()));
}

Result<Tensor> ModelRunner::enqueue_cuda(const ForwardBatch& batch, bool profile_sync) {
  cuda_->make_current();  // (the engine's thread may not be the one that loaded the model)
  step_profile::Scope t("runner: enqueue");
  Result<Tensor> out = Tensor{};
  if (graphs_ && is_decode_batch(batch)) {
    out = run_decode_graph(batch);
  } else {
    cuda_->set_step_metadata(step_arrays(batch, feed_));
    const Status fed = apply_feed(batch);
    if (!fed.is_ok()) return fed;
    out = model_->enqueue_forward(batch, kv_);
  }
  t.stop();
  if (profile_sync && out.is_ok() && out->valid() && step_profile::enabled()) {  // the forward apart from what follows
    step_profile::Scope w("runner: gpu wait");
    backend_->synchronize();
  }
  return out;
}

Status ModelRunner::execute_cuda(const ForwardBatch& batch, std::vector<float>& logits) {
  ClearStepMetadata clear{cuda_};
  Result<Tensor> out = enqueue_cuda(batch);
  if (!out.is_ok()) return out.status();
  if (!out->valid()) {
    logits.clear();
    return Status::ok();
  }
  logits.resize(static_cast<size_t>(out->numel()));
  {
    step_profile::Scope t("runner: logits download");
    backend_->download(logits.data(), out->data, logits.size() * sizeof(float));  // the one sync
  }
  return Status::ok();
}

// (execute_argmax checked the cache and device_argmax_ before the ranks started.)
Status ModelRunner::execute_argmax_local(const ForwardBatch& batch, std::vector<int32_t>& token_ids) {
  if (!cuda_) return execute_argmax_host(batch, token_ids);
  ClearStepMetadata clear{cuda_};
  Result<Tensor> out = enqueue_cuda(batch);
  if (!out.is_ok()) return out.status();
  if (!out->valid()) {
    token_ids.clear();
    return Status::ok();
  }
  token_ids.resize(static_cast<size_t>(out->n_rows()));
  step_profile::Scope t("runner: argmax + ids");
  return cuda_->argmax_rows(*out, token_ids.data());  // the one sync
}

Status ModelRunner::enqueue_argmax(const ForwardBatch& batch, std::span<const int32_t> feed) {
  if (kv_.layers.empty()) return Status::error("execute before allocate_kv_cache");
  if (!can_pipeline_argmax()) return Status::error("enqueue_argmax: not available on this runner");
  if (queued_.size() >= 2) return Status::error("enqueue_argmax: two steps are queued already");
  if (!feed.empty()) {
    if (feed.size() != batch.token_ids.size())
      return Status::errorf("enqueue_argmax: {} feed entries for {} tokens", feed.size(), batch.token_ids.size());
    for (int32_t f : feed)
      if (f >= 0 && f >= last_queued_rows_)
        return Status::errorf("enqueue_argmax: feed row {} of a step with {} logit rows", f, last_queued_rows_);
  }
  ClearStepMetadata clear{cuda_};
  feed_.assign(feed.begin(), feed.end());
  Result<Tensor> out = enqueue_cuda(batch, /*profile_sync=*/false);
  feed_.clear();  // (queued: the upload copied it)
  if (!out.is_ok()) return out.status();
  const int64_t n = out->valid() ? out->n_rows() : 0;
  const int slot = next_slot_;
  if (n > 0) EMBER_RETURN_IF_ERROR(cuda_->argmax_rows_async(*out, slot));
  next_slot_ ^= 1;
  queued_.push_back({slot, n});
  last_queued_rows_ = n;
  return Status::ok();
}

bool ModelRunner::queues_quickly(const ForwardBatch& batch) const {
  if (cuda_ == nullptr || !graphs_ || !is_decode_batch(batch)) return false;
  const auto [n, w] = decode_graph_shape(batch);
  auto it = graph_state_.find(decode_graph_key(n, w));
  return it != graph_state_.end() && it->second.captured && model_->activation_epoch() == graph_epoch_;
}

Status ModelRunner::collect_argmax(std::vector<int32_t>& token_ids) {
  if (queued_.empty()) return Status::error("collect_argmax: no step is queued");
  const QueuedArgmax q = queued_.front();
  queued_.erase(queued_.begin());
  token_ids.resize(static_cast<size_t>(q.n));
  if (q.n == 0) return Status::ok();
  step_profile::Scope t("runner: argmax wait");
  return cuda_->argmax_rows_wait(q.slot, token_ids.data(), q.n);
}

// (execute_sample checked the cache and device_sample_ before the ranks started.)
Status ModelRunner::execute_sample_local(const ForwardBatch& batch, const std::vector<DeviceSampleSpec>& rows,
                                         std::vector<DeviceSampled>& out) {
  ClearStepMetadata clear{cuda_};
  Result<Tensor> logits = enqueue_cuda(batch);
  if (!logits.is_ok()) return logits.status();
  out.clear();
  if (!logits->valid()) return rows.empty() ? Status::ok() : Status::error("execute_sample: no logit rows");
  static_assert(cuda::kSampleAdjSuppress == kAdjustSuppress && cuda::kSampleAdjBias == kAdjustBias &&
                cuda::kSampleAdjRepeat == kAdjustRepeat && cuda::kSampleAdjSubtract == kAdjustSubtract &&
                cuda::kSampleMaxTop == kDeviceMaxTopLogprobs);
  std::vector<cuda::DeviceSampleRow> dev(rows.size());
  size_t n_adj = 0;
  for (const DeviceSampleSpec& s : rows) n_adj += s.adjust.size();
  if (n_adj >= static_cast<size_t>(INT32_MAX)) return Status::error("execute_sample: too many token adjustments");
  std::vector<cuda::DeviceSampleAdj> adj;
  adj.reserve(n_adj);
  for (size_t i = 0; i < rows.size(); ++i) {
    const DeviceSampleSpec& s = rows[i];
    cuda::DeviceSampleRow& d = dev[i];
    d.logits_row = s.logits_row;
    d.greedy = s.greedy;
    // The host's apply_temperature / apply_min_p arithmetic, in the same float operations.
    d.inv_temperature = (s.temperature == 1.0f || s.temperature <= 0.0f) ? 1.0f : 1.0f / s.temperature;
    d.top_k = s.top_k;
    d.top_p = s.top_p;
    d.log_min_p = s.min_p > 0.0f ? std::log(s.min_p) : -INFINITY;
    d.want_logprob = s.logprob;
    d.n_top = s.logprob ? s.n_top : 0;
    d.u = s.u;
    d.repetition = s.repetition_penalty;
    d.adj_begin = static_cast<int32_t>(adj.size());
    d.n_adj = static_cast<int32_t>(s.adjust.size());
    for (const TokenAdjust& a : s.adjust) adj.push_back({a.token, a.flags, a.bias, a.subtract});
  }
  std::vector<cuda::DeviceSampleOut> res;
  std::vector<cuda::DeviceSampleTop> top;  // [rows, kSampleMaxTop] when some row has n_top > 0
  step_profile::Scope t("runner: sample + ids");
  EMBER_RETURN_IF_ERROR(cuda_->sample_rows(*logits, dev, adj, res, top));  // the one sync
  out.resize(res.size());
  const int64_t vocab = logits->n_cols();
  for (size_t i = 0; i < res.size(); ++i) {
    out[i].token_id = res[i].token;
    out[i].logprob = res[i].logprob;
    out[i].rank = res[i].rank;
    out[i].top.clear();
    const int64_t k = std::min<int64_t>(dev[i].n_top, vocab);
    for (int64_t j = 0; j < k; ++j) {
      const cuda::DeviceSampleTop& e = top[i * cuda::kSampleMaxTop + static_cast<size_t>(j)];
      out[i].top.push_back({e.token, e.logprob});
    }
  }
  return Status::ok();
}

#else

Status ModelRunner::execute_sample_local(const ForwardBatch&, const std::vector<DeviceSampleSpec>&,
                                         std::vector<DeviceSampled>&) {
  return Status::error("execute_sample needs CUDA");
}
Status ModelRunner::execute_cuda(const ForwardBatch& batch, std::vector<float>& logits) {
  return model_->forward(batch, kv_, logits);
}
Status ModelRunner::execute_argmax_local(const ForwardBatch& batch, std::vector<int32_t>& token_ids) {
  return execute_argmax_host(batch, token_ids);
}
Status ModelRunner::enqueue_argmax(const ForwardBatch&, std::span<const int32_t>) {
  return Status::error("enqueue_argmax needs CUDA");
}
Status ModelRunner::collect_argmax(std::vector<int32_t>&) { return Status::error("collect_argmax needs CUDA"); }
Status ModelRunner::apply_feed(const ForwardBatch&) { return Status::ok(); }
bool ModelRunner::queues_quickly(const ForwardBatch&) const { return false; }  // (the CPU runs a step as it is queued)
Result<Tensor> ModelRunner::run_decode_graph(const ForwardBatch&) { return Status::error("no CUDA"); }
void ModelRunner::sync_activation_epoch() {}

#endif

Status ModelRunner::execute_argmax_host(const ForwardBatch& batch, std::vector<int32_t>& token_ids) {
  Result<Tensor> out = model_->enqueue_forward(batch, kv_);
  if (!out.is_ok()) return out.status();
  if (!out->valid()) {
    token_ids.clear();
    return Status::ok();
  }
  token_ids.resize(static_cast<size_t>(out->n_rows()));
  return backend_->argmax_rows(*out, token_ids.data());
}

Status ModelRunner::copy_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
  return on_all_ranks([&](ModelRunner& r, int) { return r.copy_blocks_local(src_dst); });
}

Status ModelRunner::copy_blocks_local(const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
#ifdef EMBER_HAVE_CUDA
  if (cuda_) cuda_->make_current();
#endif
  for (auto [src, dst] : src_dst) {  // (all checked before anything is copied)
    if (src < 0 || dst < 0 || src >= kv_.n_blocks || dst >= kv_.n_blocks || src == dst)
      return Status::errorf("copy_blocks: block pair ({}, {}) out of range (0..{}) or not two blocks", src, dst,
                            kv_.n_blocks - 1);
  }
  // A block of one layer is contiguous in each of K, V (and their scales): copy those, on the
  // backend (a GPU copies in its stream, behind the step that wrote the source block; the
  // scales are backend memory too, allocated with the cache).
  for (auto& layer : kv_.layers) {
    for (Tensor* t : {&layer.k, &layer.v}) {
      const size_t block_bytes = t->nbytes() / static_cast<size_t>(kv_.n_blocks);
      auto* base = static_cast<uint8_t*>(t->data);
      for (auto [src, dst] : src_dst)
        backend_->copy(base + block_bytes * static_cast<size_t>(dst), base + block_bytes * static_cast<size_t>(src),
                       block_bytes);
    }
    for (float* s : {layer.k_scales, layer.v_scales}) {
      if (s == nullptr) continue;
      const size_t per_block = static_cast<size_t>(kv_.block_size) * model_->config().n_kv_heads;
      for (auto [src, dst] : src_dst)
        backend_->copy(s + per_block * static_cast<size_t>(dst), s + per_block * static_cast<size_t>(src),
                       per_block * sizeof(float));
    }
  }
  return Status::ok();
}

}  // namespace ember
