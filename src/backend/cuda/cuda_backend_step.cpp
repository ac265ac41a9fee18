// CudaBackend, step level: the step-metadata buffer (one upload per step instead of one per
// op), CUDA graph capture and replay, growing scratch without breaking graphs, and the
// deferred launches that fuse neighbouring ops (see cuda_backend_impl.h).
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/sample.cuh"
#ifdef EMBER_PROBE
#include "backend/cuda/probe.cuh"
#endif
#include "core/log.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace ember::cuda {

namespace {

constexpr size_t kAlign = 16;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void* CudaBackend::scratch(Scratch& s, size_t bytes) {
  if (bytes <= s.n) return s.p;
  const size_t n = std::max<size_t>(bytes + bytes / 4, 1u << 16);
  void* p = nullptr;
  if (capturing_) {
    // The graph being captured (and older ones) may use the old buffer: keep it alive.
    if (s.p) graveyard_.push_back(s.p);
  } else {
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
    drop_graphs();
    if (s.p) EMBER_CUDA_CHECK(cudaFree(s.p));
  }
  s.p = nullptr;
  s.n = 0;
  EMBER_CUDA_CHECK(cudaMalloc(&p, n));
  s.p = p;
  s.n = n;
  ++epoch_;
  return p;
}

const void* CudaBackend::lookup(const void* host, size_t bytes) const {
  const auto* h = static_cast<const uint8_t*>(host);
  for (const StepArray& a : step_arrays_)
    if (h >= a.host && h + bytes <= a.host + a.bytes) return a.dev + (h - a.host);
  return nullptr;
}

void CudaBackend::resolve(std::initializer_list<MetaRef*> refs) {
  size_t total = 0;
  std::vector<std::pair<MetaRef*, size_t>> misses;
  for (MetaRef* r : refs) {
    if (r->dev || r->bytes == 0 || r->host == nullptr) continue;
    r->dev = lookup(r->host, r->bytes);
    if (r->dev) continue;
    misses.emplace_back(r, total);
    total = align_up(total + r->bytes);
  }
  if (misses.empty()) return;
  if (capturing_) {
    // Host data outside the step metadata would be baked into the graph: fail the capture
    // (the pointers below only keep the recorded launches well-formed; nothing runs them).
    capture_failed_ = true;
    for (auto& [r, off] : misses) r->dev = iota_;
    return;
  }
  std::vector<uint8_t> pack(total);
  for (auto& [r, off] : misses) std::memcpy(pack.data() + off, r->host, r->bytes);
  auto* d = static_cast<uint8_t*>(scratch(meta_, total));
  // Pageable source: staged before cudaMemcpyAsync returns, so `pack` may go away.
  EMBER_CUDA_CHECK(cudaMemcpyAsync(d, pack.data(), total, cudaMemcpyHostToDevice, stream_));
  for (auto& [r, off] : misses) r->dev = d + off;
}

const int32_t* CudaBackend::longest_first_order(const int32_t* dev_lens, const int32_t* host_lens, int n) {
  const bool in_step = lookup(host_lens, static_cast<size_t>(n) * sizeof(int32_t)) != nullptr;
  if (in_step && order_epoch_ == meta_epoch_ && order_lens_ == dev_lens && order_n_ == n) return order_;
  EMBER_CUDA_CHECK(launch_longest_first(dev_lens, n, order_, stream_));
  order_epoch_ = in_step ? meta_epoch_ : 0;
  order_lens_ = dev_lens;
  order_n_ = n;
  return order_;
}

const int32_t* CudaBackend::seq_ids(const std::vector<int32_t>& ids, MetaRef& ref) {
  bool identity = ids.size() <= static_cast<size_t>(kIotaSize);
  for (size_t i = 0; identity && i < ids.size(); ++i) identity = ids[i] == static_cast<int32_t>(i);
  if (identity) return ids.empty() ? nullptr : iota_;
  ref.host = ids.data();
  ref.bytes = ids.size() * sizeof(int32_t);
  return nullptr;
}

bool CudaBackend::on_device(const void* p) {
  auto it = device_ptr_cache_.find(p);
  if (it != device_ptr_cache_.end()) return it->second;
  cudaPointerAttributes attr{};
  bool dev = false;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // plain host memory may report an error on old drivers
  } else {
    dev = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  }
  if (device_ptr_cache_.size() < 64) device_ptr_cache_.emplace(p, dev);
  return dev;
}

// ---- deferred launches ----

bool CudaBackend::gemv_takes_pending_norm(const Tensor& x, DType wtype, const void* out, size_t out_bytes) const {
  const int n = static_cast<int>(x.n_rows());
  const int64_t k = x.n_cols();
  if (!pn_.active || pn_.b || pn_.out != x.data || pn_.rows != n || pn_.d != k) return false;
  // Every block reads the norm's input rows: no GEMV output may land on them.
  if (overlaps(out, out_bytes, pn_.x, static_cast<size_t>(n * k) * sizeof(float))) return false;
  const XNorm nm = pn_.xnorm();
  return wtype != DType::BF16 && qgemv_takes_norm(qformat_of(wtype), n, k, pn_.x, &nm);
}

bool CudaBackend::try_defer_gemv(const Tensor& x, const Tensor& w, const float* bias, Tensor& out, bool accumulate) {
  if (!fuse_) return false;
  const int64_t n = x.n_rows(), k = x.n_cols(), m = w.n_rows();
  if (is_packed(w)) {
    if (n > kQGemvMaxBatch || !qgemv_supported(static_cast<int>(n), k, x.data)) return false;
  } else if (w.dtype != DType::BF16 || n > kGemvMaxBatch || !gemv_supported(static_cast<int>(n), k, x.data, w.data)) {
    return false;
  }
  const size_t x_bytes = static_cast<size_t>(n * k) * sizeof(float);
  const size_t out_bytes = static_cast<size_t>(n * m) * sizeof(float);
  if (overlaps(out.data, out_bytes, x.data, x_bytes)) return false;
  bool join = pg_.count > 0 && pg_.count < kGemvMaxSegs && pg_.x == x.as<float>() && pg_.n == n && pg_.k == k &&
              pg_.wtype == w.dtype;
  for (int s = 0; join && s < pg_.count; ++s) {
    const size_t b = static_cast<size_t>(n * pg_.segs[s].m) * sizeof(float);
    if (overlaps(out.data, out_bytes, pg_.segs[s].out, b)) join = false;
  }
  if (join && pg_.norm.w && overlaps(out.data, out_bytes, pg_.x_raw, x_bytes)) join = false;
  if (!join) {
    XNorm norm;
    const float* x_raw = nullptr;
    if (gemv_takes_pending_norm(x, w.dtype, out.data, out_bytes)) {
      norm = pn_.xnorm();
      x_raw = pn_.x;
      pn_.active = false;  // launched inside the GEMV
    }
    flush();
    pg_.x = x.as<float>();
    pg_.n = static_cast<int>(n);
    pg_.k = k;
    pg_.wtype = w.dtype;
    pg_.norm = norm;
    pg_.x_raw = x_raw;
    pg_.rope = GemvRope{};
  }
  GemvSeg& seg = pg_.segs[pg_.count++];
  seg.w = w.data;
  seg.bias = bias;
  seg.out = out.as<float>();
  seg.m = m;
  pg_.accumulate[pg_.count - 1] = accumulate;
  return true;
}

void CudaBackend::flush() {
  roped_.active = false;
  if (pat_.active) {  // (the oldest pending op: attention flushed everything before it)
    pat_.active = false;
    launch_attention_group(pat_.args, pat_.kind);
  }
  if (prs_active_) {  // (the oldest pending op: kv_store flushed everything before it)
    prs_active_ = false;
    EMBER_CUDA_CHECK(launch_rope_kv_store(prs_, stream_, /*pdl=*/true));
  }
  if (pgm_.active) {
    pgm_.active = false;
    pgm_.run(*this, pgm_.jobs, false);
  }
  if (pg_.count > 0) {
    const int count = pg_.count;
    pg_.count = 0;
    // (the o GEMV right after a gated decode attention waits at its gate: hold_gate.cuh)
    const HoldGateUse gate_use{hold_gate_words_, hold_gate_arrivals_, hold_gate_parts_};
    const HoldGateUse* gate = hold_gate_arrivals_ > 0 && count == 1 ? &gate_use : nullptr;
    hold_gate_arrivals_ = 0;
    const GemvRope rope = pg_.rope;
    pg_.rope = GemvRope{};
    last_gemv_wtype_ = pg_.wtype;
    if (pg_.wtype != DType::BF16) {
      QGemvSeg q[kQGemvMaxSegs];
      for (int s = 0; s < count; ++s) {
        const GemvSeg& g = pg_.segs[s];
        q[s] = QGemvSeg{g.w, g.bias, g.out, g.m, pg_.accumulate[s]};
      }
      const L2Prefetch* next = learn_next_gemv(count, rope.head_dim > 0);
      if (next) {
        int64_t rows = 0;
        for (int s = 0; s < count; ++s) rows += pg_.segs[s].m;
        next = counted_prefetch(next, qgemv_prefetch_takes(qformat_of(pg_.wtype), pg_.n, rows, pg_.k, pg_.norm.w != nullptr));
      }
      if (gate && (next || rope.head_dim > 0 ||
                   !qgemv_gate_takes(qformat_of(pg_.wtype), pg_.n, pg_.segs[0].m, pg_.k, pg_.norm.w != nullptr)))
        gate = nullptr;
      if (gate) ++hold_gate_launches_;
      EMBER_CUDA_CHECK(launch_qgemv_multi(qformat_of(pg_.wtype), q, count, pg_.input(), pg_.n, pg_.k, /*pdl=*/true,
                                          stream_, QGemvPath::Auto, &pg_.norm, 0,
                                          rope.head_dim > 0 ? &rope : nullptr, next, gate));
    } else {
      int64_t rows = 0;  // of all the matrices (one grid)
      for (int s = 0; s < count; ++s) rows += pg_.segs[s].m;
      const int variant = gemv_variant(pg_.n, rows, pg_.k);
      const L2Prefetch* next = learn_next_gemv(count, rope.head_dim > 0);
      if (next) next = counted_prefetch(next, gemv_prefetch_takes(variant, pg_.n, count, pg_.segs[0].m, pg_.k));
      if (gate && gemv_hold_applies(variant, pg_.n, rows, pg_.k)) ++hold_gate_launches_;
      EMBER_CUDA_CHECK(launch_gemv_bf16_multi(pg_.segs, count, pg_.x, pg_.n, pg_.k, variant, /*pdl=*/true, stream_,
                                              rope.head_dim > 0 ? &rope : nullptr, next, gate));
    }
  }
  if (pa_.active) {
    pa_.active = false;
    EMBER_CUDA_CHECK(launch_add(pa_.a, pa_.b, pa_.out, pa_.n, stream_, /*pdl=*/true));
  }
  if (pn_.active) {
    pn_.active = false;
    launch_norm(pn_);
  }
  if (pgl_.active) {
    pgl_.active = false;
    if (pgl_.in_type == DType::BF16)
      EMBER_CUDA_CHECK(launch_glu_rows(DType::BF16, pgl_.gate, pgl_.up, pgl_.gelu_tanh, pgl_.out, pgl_.rows, pgl_.cols,
                                       nullptr, stream_, /*pdl=*/true));
    else
      EMBER_CUDA_CHECK(launch_glu(static_cast<const float*>(pgl_.gate), static_cast<const float*>(pgl_.up),
                                  pgl_.gelu_tanh, pgl_.out, pgl_.rows * pgl_.cols, stream_, /*pdl=*/true));
  }
  if (pr_.active) {
    pr_.active = false;
    EMBER_CUDA_CHECK(launch_rope2(pr_.x, pr_.n_heads, pr_.x2, pr_.n_heads2, pr_.positions,
                                  pr_.inv_freq, pr_.n, pr_.head_dim, pr_.rotary_dim, pr_.neox,
                                  pr_.factor, stream_, /*pdl=*/true));
  }
  n_read_once_ = 0;  // a hint covers the ops up to its reader, never past a flush
}

const L2Prefetch* CudaBackend::learn_next_gemv(int count, bool roped) {
  const int mode = next_l2_mode(pg_.wtype);
  if (mode == 0) return nullptr;
  auto bytes_of = [&](int s) {  // the matrix's bytes on the device
    return pg_.wtype == DType::BF16 ? static_cast<size_t>(pg_.segs[s].m * pg_.k) * 2
                                    : qweight_bytes(qformat_of(pg_.wtype), pg_.segs[s].m, pg_.k);
  };
  if (last_gemv_w_ != nullptr) {
    L2Prefetch next;
    if (mode == 2 || count == 3) {
      size_t total = 0;
      for (int s = 0; s < count; ++s) total += bytes_of(s);
      const double keep = next_l2_cap_ > 0 && total > next_l2_cap_ ? static_cast<double>(next_l2_cap_) / total : 1.0;
      for (int s = 0; s < count && s < kL2PrefetchRanges; ++s) {
        const size_t whole = bytes_of(s);
        const size_t bytes = std::min<size_t>(static_cast<size_t>(whole * keep), UINT32_MAX) / 16 * 16;
        if (bytes == 0 || reinterpret_cast<uintptr_t>(pg_.segs[s].w) % 16 != 0) continue;
        next.p[next.n] = pg_.segs[s].w;
        next.bytes[next.n] = static_cast<uint32_t>(bytes);
        ++next.n;
      }
      next.when = next_l2_when_;
    }
    next_gemv_[last_gemv_w_] = next;
  }
  last_gemv_w_ = pg_.segs[0].w;
  const auto it = next_gemv_.find(pg_.segs[0].w);
  if (roped || it == next_gemv_.end() || it->second.n == 0) return nullptr;
  return &it->second;
}

const L2Prefetch* CudaBackend::counted_prefetch(const L2Prefetch* next, bool takes) {
  if (!takes) return nullptr;
  ++next_l2_launches_;
  return next;
}

// ---- step metadata ----

void CudaBackend::set_step_metadata(const std::vector<HostArray>& arrays) {
  EMBER_CHECK(!capturing_, "set_step_metadata during a graph capture");
  flush();
  last_gemv_w_ = nullptr;  // (learn_next_gemv: a step's first GEMV follows none)
  step_arrays_.clear();
  ++meta_epoch_;
  size_t total = 0;
  for (const HostArray& a : arrays) total = align_up(total + a.bytes);
  if (total == 0) return;
  // The pinned staging is reused: wait until the previous step's upload has read it.
  if (meta_event_pending_) EMBER_CUDA_CHECK(cudaEventSynchronize(meta_event_));
  meta_event_pending_ = false;
  if (total > meta_host_bytes_) {
    if (meta_host_) EMBER_CUDA_CHECK(cudaFreeHost(meta_host_));
    meta_host_ = nullptr;
    meta_host_bytes_ = 0;
    const size_t n = std::max<size_t>(total + total / 4, 1u << 16);
    EMBER_CUDA_CHECK(cudaHostAlloc(&meta_host_, n, cudaHostAllocDefault));
    meta_host_bytes_ = n;
  }
  auto* dev = static_cast<uint8_t*>(scratch(step_dev_, total));
  auto* host = static_cast<uint8_t*>(meta_host_);
  size_t off = 0;
  for (const HostArray& a : arrays) {
    if (a.bytes > 0) std::memcpy(host + off, a.data, a.bytes);
    if (a.bytes > 0 && a.data) step_arrays_.push_back({static_cast<const uint8_t*>(a.data), a.bytes, dev + off});
    off = align_up(off + a.bytes);
  }
  // (the kernel reads the staging when it runs, as the copy engine would: the event guards both)
  if (zero_copy_steps_ && total <= kZeroCopyMetaBytes)
    EMBER_CUDA_CHECK(launch_copy16(dev, host, total, stream_));  // (total: a multiple of kAlign)
  else
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dev, host, total, cudaMemcpyHostToDevice, stream_));
  EMBER_CUDA_CHECK(cudaEventRecord(meta_event_, stream_));
  meta_event_pending_ = true;
}

// ---- graphs ----

Status CudaBackend::begin_capture() {
  if (capturing_) return Status::error("begin_capture: already capturing");
  flush();
  EMBER_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  capturing_ = true;
  ++meta_epoch_;
  capture_failed_ = false;
  return Status::ok();
}

Status CudaBackend::end_capture(uint64_t key) {
  if (!capturing_) return Status::error("end_capture without begin_capture");
  flush();
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  capturing_ = false;
  ++meta_epoch_;
  if (e != cudaSuccess || capture_failed_ || graph == nullptr) {
    (void)cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return Status::errorf("graph capture failed ({})", e != cudaSuccess ? cudaGetErrorString(e)
                                                        : "an op needed host data outside the step metadata");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (ie != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::errorf("cudaGraphInstantiate: {}", cudaGetErrorString(ie));
  }
  auto it = graphs_.find(key);
  if (it != graphs_.end()) cudaGraphExecDestroy(it->second.exec);
  graphs_[key] = Graph{exec, epoch_};
  return Status::ok();
}

bool CudaBackend::launch_graph(uint64_t key) {
  auto it = graphs_.find(key);
  if (it == graphs_.end()) return false;
  if (it->second.epoch != epoch_) {  // a buffer it uses was reallocated since
    cudaGraphExecDestroy(it->second.exec);
    graphs_.erase(it);
    return false;
  }
  flush();
#ifdef EMBER_PROBE
  probe::before_graph(stream_);
#endif
  EMBER_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
  return true;
}

void CudaBackend::drop_graphs() {
  if (capturing_) return;
  if (graphs_.empty() && graveyard_.empty()) return;
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
  for (void* p : graveyard_) cudaFree(p);
  graveyard_.clear();
}

Result<GpuMemoryInfo> CudaBackend::memory_info() {
  GpuMemoryInfo info;
  EMBER_CUDA_TRY(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

Status CudaBackend::reserve_argmax(int64_t n) {
  if (n <= argmax_cap_) return Status::ok();
  EMBER_CUDA_TRY(cudaStreamSynchronize(stream_));  // queued downloads land before their slots move
  const int64_t cap = std::max<int64_t>(n, 1024);
  int32_t* dev = nullptr;
  EMBER_CUDA_TRY(cudaMalloc(&dev, static_cast<size_t>(cap) * sizeof(int32_t)));
  if (argmax_dev_) {  // (a pipelined step may still feed from the last picks)
    EMBER_CUDA_TRY(cudaMemcpy(dev, argmax_dev_, static_cast<size_t>(argmax_cap_) * sizeof(int32_t),
                              cudaMemcpyDeviceToDevice));
    EMBER_CUDA_TRY(cudaFree(argmax_dev_));
  }
  argmax_dev_ = dev;
  if (argmax_host_) EMBER_CUDA_TRY(cudaFreeHost(argmax_host_));
  argmax_host_ = nullptr;
  EMBER_CUDA_TRY(cudaMallocHost(&argmax_host_, static_cast<size_t>(cap) * sizeof(int32_t)));
  for (int32_t*& slot : argmax_slot_host_) {
    if (slot == nullptr) continue;
    int32_t* grown = nullptr;
    EMBER_CUDA_TRY(cudaMallocHost(&grown, static_cast<size_t>(cap) * sizeof(int32_t)));
    std::memcpy(grown, slot, static_cast<size_t>(argmax_cap_) * sizeof(int32_t));
    EMBER_CUDA_TRY(cudaFreeHost(slot));
    slot = grown;
  }
  argmax_cap_ = cap;
  return Status::ok();
}

Status CudaBackend::launch_argmax(const Tensor& logits, int slot) {
  if (logits.device != Device::CUDA || logits.dtype != DType::F32 || logits.n_dims < 1)
    return Status::errorf("argmax_rows: expected F32 [n, vocab] device logits, got {}", shape_string(logits));
  const int64_t n = logits.n_rows(), vocab = logits.n_cols();
  flush();
  EMBER_RETURN_IF_ERROR(reserve_argmax(n));
  // (taken after reserve_argmax, which may move the buffers; a slot's is made on its first use)
  int32_t*& host = slot < 0 ? argmax_host_ : argmax_slot_host_[slot];
  if (host == nullptr) EMBER_CUDA_TRY(cudaMallocHost(&host, static_cast<size_t>(argmax_cap_) * sizeof(int32_t)));
  // EMBER_CUDA_ARGMAX_SLICES=0: one block a row whatever the row count (same-call A/B runs).
  static const bool argmax_slices = [] {
    const char* e = std::getenv("EMBER_CUDA_ARGMAX_SLICES");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  if (argmax_scratch_ == nullptr) {  // rows split over blocks (up to 64 rows): parts and zeroed tickets
    const size_t bytes = argmax_scratch_bytes();
    EMBER_CUDA_TRY(cudaMalloc(&argmax_scratch_, bytes));
    EMBER_CUDA_TRY(cudaMemsetAsync(argmax_scratch_, 0, bytes, stream_));
  }
  // Zero copy: the kernel writes the host buffer too, and whatever waits on the stream after it
  // sees those writes.
  EMBER_CUDA_TRY(launch_argmax_rows(static_cast<const float*>(logits.data), static_cast<int>(n), vocab,
                                    argmax_dev_, zero_copy_steps_ ? host : nullptr,
                                    n <= 64 && argmax_slices ? argmax_scratch_ : nullptr, stream_));
  if (!zero_copy_steps_)
    EMBER_CUDA_TRY(cudaMemcpyAsync(host, argmax_dev_, static_cast<size_t>(n) * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, stream_));
  return Status::ok();
}

Status CudaBackend::argmax_rows(const Tensor& logits, int32_t* host_out) {
  if (capturing_) return Status::error("argmax_rows during a graph capture");
  const int64_t n = logits.n_rows();
  if (n == 0) return Status::ok();
  EMBER_RETURN_IF_ERROR(launch_argmax(logits, -1));
  EMBER_CUDA_TRY(cudaStreamSynchronize(stream_));
  std::memcpy(host_out, argmax_host_, static_cast<size_t>(n) * sizeof(int32_t));
  return Status::ok();
}

Status CudaBackend::argmax_rows_async(const Tensor& logits, int slot) {
  if (capturing_) return Status::error("argmax_rows_async during a graph capture");
  if (slot < 0 || slot > 1) return Status::errorf("argmax_rows_async: slot {} (0 or 1)", slot);
  const int64_t n = logits.n_rows();
  argmax_slot_n_[slot] = n;
  if (n == 0) return Status::ok();
  EMBER_RETURN_IF_ERROR(launch_argmax(logits, slot));
  if (argmax_slot_event_[slot] == nullptr)
    EMBER_CUDA_TRY(cudaEventCreateWithFlags(&argmax_slot_event_[slot], cudaEventDisableTiming));
  EMBER_CUDA_TRY(cudaEventRecord(argmax_slot_event_[slot], stream_));
  return Status::ok();
}

Status CudaBackend::argmax_rows_wait(int slot, int32_t* host_out, int64_t n) {
  if (slot < 0 || slot > 1) return Status::errorf("argmax_rows_wait: slot {} (0 or 1)", slot);
  if (n != argmax_slot_n_[slot])
    return Status::errorf("argmax_rows_wait: slot {} holds {} ids, {} asked", slot, argmax_slot_n_[slot], n);
  if (n == 0) return Status::ok();
  EMBER_CUDA_TRY(cudaEventSynchronize(argmax_slot_event_[slot]));
  std::memcpy(host_out, argmax_slot_host_[slot], static_cast<size_t>(n) * sizeof(int32_t));
  return Status::ok();
}

Status CudaBackend::feed_tokens(const int32_t* token_ids, const int32_t* feed, int n) {
  if (capturing_) return Status::error("feed_tokens during a graph capture");
  if (n <= 0) return Status::ok();
  if (argmax_dev_ == nullptr) return Status::error("feed_tokens: no argmax was queued before");
  const size_t bytes = static_cast<size_t>(n) * sizeof(int32_t);
  auto* tokens = const_cast<int32_t*>(static_cast<const int32_t*>(lookup(token_ids, bytes)));
  const auto* f = static_cast<const int32_t*>(lookup(feed, bytes));
  if (tokens == nullptr || f == nullptr) return Status::error("feed_tokens: token ids and feed must be step metadata");
  flush();
  EMBER_CUDA_TRY(launch_feed_tokens(tokens, f, argmax_dev_, n, stream_));
  return Status::ok();
}

Status CudaBackend::sample_rows(const Tensor& logits, const std::vector<DeviceSampleRow>& rows,
                                const std::vector<DeviceSampleAdj>& adj, std::vector<DeviceSampleOut>& out,
                                std::vector<DeviceSampleTop>& top) {
  if (capturing_) return Status::error("sample_rows during a graph capture");
  if (logits.device != Device::CUDA || logits.dtype != DType::F32 || logits.n_dims < 1)
    return Status::errorf("sample_rows: expected F32 [n, vocab] device logits, got {}", shape_string(logits));
  const int64_t n_logit_rows = logits.n_rows(), vocab = logits.n_cols();
  const size_t n = rows.size(), m = adj.size();
  out.resize(n);
  top.clear();
  if (n == 0) return Status::ok();
  bool any_top = false;
  for (const DeviceSampleRow& r : rows) {
    if (r.n_top < 0 || r.n_top > kSampleMaxTop)
      return Status::errorf("sample_rows: {} top alternatives (at most {})", r.n_top, kSampleMaxTop);
    any_top = any_top || (r.n_top > 0 && r.want_logprob);
    if (r.logits_row < 0 || r.logits_row >= n_logit_rows)
      return Status::errorf("sample_rows: logits row {} of {}", r.logits_row, n_logit_rows);
    if (r.adj_begin < 0 || r.n_adj < 0 || static_cast<size_t>(r.adj_begin) + static_cast<size_t>(r.n_adj) > m)
      return Status::errorf("sample_rows: adjustments [{}, +{}) of {}", r.adj_begin, r.n_adj, m);
    for (int j = 0; j < r.n_adj; ++j) {  // the kernel's index needs distinct ascending ids in the row
      const int32_t t = adj[static_cast<size_t>(r.adj_begin + j)].token;
      if (t < 0 || t >= vocab || (j > 0 && t <= adj[static_cast<size_t>(r.adj_begin + j - 1)].token))
        return Status::errorf("sample_rows: adjustment token {} (entry {} of a row): ids must ascend in [0, {})", t,
                              j, vocab);
    }
  }
  flush();
  // One buffer: results and top slots (downloaded by one copy), then rows and adjustments
  // (uploaded by one copy); all 16-byte sized.
  static_assert(sizeof(DeviceSampleOut) % 16 == 0 && sizeof(DeviceSampleRow) % 16 == 0 &&
                sizeof(DeviceSampleAdj) == 16 && kSampleMaxTop * sizeof(DeviceSampleTop) % 16 == 0);
  const size_t res_bytes = n * sizeof(DeviceSampleOut);
  const size_t top_bytes = any_top ? n * kSampleMaxTop * sizeof(DeviceSampleTop) : 0;
  const size_t out_bytes = res_bytes + top_bytes;
  const size_t in_bytes = n * sizeof(DeviceSampleRow) + m * sizeof(DeviceSampleAdj);
  if (out_bytes + in_bytes > sample_cap_) {
    EMBER_CUDA_TRY(cudaStreamSynchronize(stream_));
    if (sample_dev_) EMBER_CUDA_TRY(cudaFree(sample_dev_));
    if (sample_host_) EMBER_CUDA_TRY(cudaFreeHost(sample_host_));
    sample_dev_ = sample_host_ = nullptr;
    sample_cap_ = 0;
    const size_t cap =
        std::max<size_t>((out_bytes + in_bytes) * 3 / 2, 1024 * (sizeof(DeviceSampleOut) + sizeof(DeviceSampleRow)));
    EMBER_CUDA_TRY(cudaMalloc(&sample_dev_, cap));
    EMBER_CUDA_TRY(cudaMallocHost(&sample_host_, cap));
    sample_cap_ = cap;
  }
  // The previous call's results were read after its sync: the pinned inputs can be rewritten.
  char* host = static_cast<char*>(sample_host_);
  char* dev = static_cast<char*>(sample_dev_);
  const size_t rows_at = out_bytes, adj_at = rows_at + n * sizeof(DeviceSampleRow);
  std::memcpy(host + rows_at, rows.data(), n * sizeof(DeviceSampleRow));
  if (m > 0) std::memcpy(host + adj_at, adj.data(), m * sizeof(DeviceSampleAdj));
  EMBER_CUDA_TRY(cudaMemcpyAsync(dev + rows_at, host + rows_at, in_bytes, cudaMemcpyHostToDevice, stream_));
  EMBER_CUDA_TRY(launch_sample_rows(static_cast<const float*>(logits.data), vocab,
                                    reinterpret_cast<const DeviceSampleRow*>(dev + rows_at), static_cast<int>(n),
                                    reinterpret_cast<const DeviceSampleAdj*>(dev + adj_at), static_cast<int64_t>(m),
                                    reinterpret_cast<DeviceSampleOut*>(dev),
                                    any_top ? reinterpret_cast<DeviceSampleTop*>(dev + res_bytes) : nullptr, stream_));
  EMBER_CUDA_TRY(cudaMemcpyAsync(host, dev, out_bytes, cudaMemcpyDeviceToHost, stream_));
  EMBER_CUDA_TRY(cudaStreamSynchronize(stream_));
  std::memcpy(out.data(), host, res_bytes);
  if (any_top) {
    top.resize(n * kSampleMaxTop);
    std::memcpy(top.data(), host + res_bytes, top_bytes);
  }
  return Status::ok();
}

}  // namespace ember::cuda
