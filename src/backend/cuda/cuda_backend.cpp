// CudaBackend: host side of the CUDA backend. Checks shapes and dtypes, finds the device copy
// of each op's host metadata (ids, positions, slots, block tables: the step metadata, else
// one upload per op), and launches the kernels of the *.cu files on the backend's stream.
// Step metadata, graphs and the fused (deferred) launches are in cuda_backend_step.cpp.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/nccl_group.h"
#include "backend/cuda/qgemm.cuh"
#include "backend/cuda/qgemm_wg.cuh"
#include "backend/cuda/rows.cuh"
#include "core/log.h"
#include "core/thread_pool.h"
#include "quant/quant.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

namespace ember::cuda {

namespace {

constexpr size_t kLtWorkspaceBytes = 32u << 20;  // cuBLASLt's recommended size on Hopper
constexpr int64_t kConcurrentGemmMaxRows = 512;
constexpr int64_t kSplitKMinK = 8192;  // the down projection's k (14336 at 8B), not q/k/v/o's 4096
constexpr size_t kStagingBytes = 64u << 20;      // weight upload chunk

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(void* p, size_t n) : p_(p), n_(n) {}
  ~CudaBuffer() override {
    if (p_) cudaFree(p_);
  }
  void* data() override { return p_; }
  size_t size() const override { return n_; }

 private:
  void* p_;
  size_t n_;
};

void require(const Tensor& t, DType dtype, const char* what) {
  EMBER_CHECK(t.valid() && t.device == Device::CUDA, "{} must be a CUDA tensor", what);
  EMBER_CHECK(t.dtype == dtype, "{} must be {}, got {}", what, dtype_name(dtype), dtype_name(t.dtype));
}

// Rows [r0, r0 + nr) of a host matrix as an upload source: plain types as stored, quantized
// types dequantized to F32 into deq (by the pool's threads when there is one).
const void* host_rows(const Tensor& host, bool plain, int64_t r0, int64_t nr, std::vector<float>& deq,
                      ThreadPool* pool) {
  if (plain) return host.row_ptr(r0);
  const int64_t cols = host.n_cols();
  deq.resize(static_cast<size_t>(nr * cols));
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      quant::dequantize_row(host.dtype, host.row_ptr(r0 + r), deq.data() + r * cols, cols);
  };
  if (pool) pool->parallel_for(nr, rows);
  else rows(0, nr);
  return deq.data();
}

// Threads for dequantizing a quantized host matrix (GGUF k-quants and friends) before upload:
// one per core up to 16, none for plain types or small matrices (a pool per weight: loading
// ends without the backend knowing, and idle threads would outlive it).
std::unique_ptr<ThreadPool> dequant_pool(const Tensor& host, bool plain) {
  constexpr int64_t kMinElements = int64_t{1} << 20;
  const int threads = std::min(16, ThreadPool::default_threads());
  if (plain || threads < 2 || host.numel() < kMinElements) return nullptr;
  return std::make_unique<ThreadPool>(threads);
}

// An on-by-default switch of the environment (experiments, A/B runs): off only when set to "0".
bool switched_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::string(v) == "0");
}

}  // namespace

int CudaBackend::gemv_variant(int n, int64_t m, int64_t k) const {
  if (gemv_variant_takes(gemv_variant_, n, k)) return gemv_variant_;
  const int picked = gemv_pick_variant(n, m, k);
  // (the hold variant runs variant 7 where it does not apply)
  return picked == 7 && n == 1 && gemv_hold_ != 0 ? gemv_hold_ : picked;
}

Result<std::unique_ptr<Backend>> CudaBackend::create(int device) {
  int count = 0;
  EMBER_CUDA_TRY(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    return Status::errorf("CUDA device {} does not exist ({} found)", device, count);
  EMBER_CUDA_TRY(cudaSetDevice(device));
  cudaDeviceProp prop{};
  EMBER_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  if (prop.major < 8)
    return Status::errorf("CUDA device {} ({}) has compute capability {}.{}; ember needs 8.0+",
                          device, prop.name, prop.major, prop.minor);
  std::unique_ptr<CudaBackend> be(new CudaBackend());
  be->device_ = device;
  be->num_sms_ = prop.multiProcessorCount;
  be->gpu_name_ = prop.name;
  be->next_l2_pays_ = l2_prefetch_pays_on(be->gpu_name_);
  be->fuse_ = switched_on("EMBER_CUDA_FUSE");
  be->attn_fill_ = switched_on("EMBER_CUDA_ATTN_FILL");
  if (const char* v = std::getenv("EMBER_CUDA_PDL_EARLY")) be->pdl_early_ = std::atoi(v);
  be->attn_rope_ = switched_on("EMBER_CUDA_ATTN_ROPE");
  if (const char* v = std::getenv("EMBER_CUDA_GEMV_ROPE")) be->gemv_rope_ = std::strcmp(v, "0") == 0 ? 0 : 1;
  be->keys_as_m_ = switched_on("EMBER_CUDA_KEYS_AS_M");
  if (const char* v = std::getenv("EMBER_CUDA_ATTN_O")) be->attn_o_ = std::clamp(std::atoi(v), 0, 2);
  if (const char* v = std::getenv("EMBER_CUDA_ATTN_O_THREADS")) be->attn_o_threads_ = std::atoi(v) == 256 ? 256 : 512;
  if (const char* v = std::getenv("EMBER_CUDA_ATTN_O_ROWS")) be->attn_o_rows_ = std::atoi(v) == 64 ? 64 : 32;
  if (const char* v = std::getenv("EMBER_CUDA_NEXT_L2")) be->next_l2_ = std::clamp(std::atoi(v), 0, 2);
  if (const char* v = std::getenv("EMBER_CUDA_NEXT_L2_WHEN")) be->next_l2_when_ = std::clamp(std::atoi(v), 0, 2);
  if (const char* v = std::getenv("EMBER_CUDA_NEXT_L2_KB"))
    be->next_l2_cap_ = static_cast<size_t>(std::max(0L, std::atol(v))) * 1024;
  be->longest_first_ = switched_on("EMBER_CUDA_LONGEST_FIRST");
  // Pinned host memory the kernels address directly (unified addressing maps every
  // cudaHostAlloc'd buffer); EMBER_CUDA_ZERO_COPY_STEP=0 keeps the copies (A/B runs).
  be->zero_copy_steps_ = prop.unifiedAddressing && prop.canMapHostMemory && switched_on("EMBER_CUDA_ZERO_COPY_STEP");
  be->wgmma_prefill_ = wgmma_prefill_available(device) && switched_on("EMBER_CUDA_WGMMA_PREFILL");
  be->fp8_outer_ok_ = switched_on("EMBER_CUDA_FP8_OUTER");
  if (const char* v = std::getenv("EMBER_CUDA_GEMV_VARIANT")) be->gemv_variant_ = std::atoi(v);
  // The 4 + 4-row form by default: +0.6% bf16 batch 1 on an H100, the 4 + 6 form +0.0%
  // (docs/CUDA_NOTES.md "Session 37"). EMBER_CUDA_GEMV_HOLD=0 runs variant 7, =3 the 4 + 6 form.
  be->gemv_hold_ = kGemvHold2Variant;
  if (const char* v = std::getenv("EMBER_CUDA_GEMV_HOLD"))
    be->gemv_hold_ = std::string(v) == "3" ? kGemvHoldVariant : std::string(v) == "2" ? kGemvHold2Variant : 0;
  if (const char* v = std::getenv("EMBER_CUDA_HOLD_GATE_PARTS")) be->hold_gate_parts_ = std::clamp(std::atoi(v), 1, 3);
  if (const char* v = std::getenv("EMBER_CUDA_HOLD_GATE")) be->hold_gate_point_ = std::clamp(std::atoi(v), 0, 3);
  if (const char* v = std::getenv("EMBER_CUDA_QGEMV_GATE")) be->qgemv_gate_point_ = std::clamp(std::atoi(v), 0, 3);
  if (be->hold_gate_point_ != 0 || be->qgemv_gate_point_ != 0) {
    EMBER_CUDA_TRY(cudaMalloc(&be->hold_gate_words_, 3 * sizeof(uint32_t)));
    EMBER_CUDA_TRY(cudaMemset(be->hold_gate_words_, 0, 3 * sizeof(uint32_t)));
  }
  if (be->attn_o_ == 2) {  // (zeroed once here; every launch leaves them zero)
    EMBER_CUDA_TRY(cudaMalloc(&be->attn_o_counters_, kAttnOSplitMaxChunks * sizeof(uint32_t)));
    EMBER_CUDA_TRY(cudaMemset(be->attn_o_counters_, 0, kAttnOSplitMaxChunks * sizeof(uint32_t)));
  }
  if (const char* v = std::getenv("EMBER_CUDA_DECODE_SPLITS")) be->decode_splits_ = std::max(0, std::atoi(v));
  // Prefill-attention schedule, for A/B runs: 1 the warp-specialized kernel with 128-key tiles
  // (the default before session 14), 4 three consumers overlapping softmax and P V on 64-key
  // tiles (the default); both exist for every K/V type the wgmma kernels take.
  if (const char* v = std::getenv("EMBER_CUDA_PREFILL_MODE")) {
    const int mode = std::atoi(v);
    if (mode == 1 || mode == 4) {
      be->prefill_mode_ = mode;
      be->prefill_keys_ = mode == 1 ? 128 : 64;
    } else {
      EMBER_LOG_WARN("cuda backend: EMBER_CUDA_PREFILL_MODE={} ignored (1 or 4)", v);
    }
  }
  EMBER_CUDA_TRY(cudaStreamCreateWithFlags(&be->stream_, cudaStreamNonBlocking));
  EMBER_CUDA_TRY(cudaEventCreateWithFlags(&be->meta_event_, cudaEventDisableTiming));
  EMBER_ASSIGN_OR_RETURN(be->lt_, LtGemm::create());
  EMBER_CUDA_TRY(cudaMalloc(&be->lt_ws_, kLtWorkspaceBytes));
  be->concurrent_gemms_ = switched_on("EMBER_CUDA_CONCURRENT_GEMMS");
  be->accumulate_gemms_ = switched_on("EMBER_CUDA_ACCUMULATE");
  be->lean_glu_ = switched_on("EMBER_CUDA_LEAN_GLU");
  be->packed_gemm_ = switched_on("EMBER_CUDA_QGEMM") && qgemm_available(device);
  be->packed_wg_ = switched_on("EMBER_CUDA_QGEMM_WG") && qgemm_wg_available(device);
  if (const char* v = std::getenv("EMBER_CUDA_QGEMM_WG_MAX_ROWS")) be->packed_wg_max_rows_ = std::max(0, std::atoi(v));
  be->stage_x_once_ = switched_on("EMBER_CUDA_QGEMM_STAGE_ONCE");
  be->fold_norm_ = switched_on("EMBER_CUDA_FOLD_NORM");
  EMBER_CUDA_TRY(cudaEventCreateWithFlags(&be->fork_event_, cudaEventDisableTiming));
  for (int i = 0; i < kSideStreams; ++i) {
    EMBER_CUDA_TRY(cudaStreamCreateWithFlags(&be->side_[i], cudaStreamNonBlocking));
    EMBER_CUDA_TRY(cudaEventCreateWithFlags(&be->join_event_[i], cudaEventDisableTiming));
    EMBER_CUDA_TRY(cudaMalloc(&be->side_ws_[i], kLtWorkspaceBytes));
  }
  std::vector<int32_t> iota(kIotaSize);
  std::iota(iota.begin(), iota.end(), 0);
  EMBER_CUDA_TRY(cudaMalloc(&be->iota_, iota.size() * sizeof(int32_t)));
  EMBER_CUDA_TRY(cudaMemcpy(be->iota_, iota.data(), iota.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  EMBER_CUDA_TRY(cudaMalloc(&be->order_, kMaxLongestFirst * sizeof(int32_t)));
  EMBER_LOG_INFO("cuda backend: device {} ({}, {} SMs, {:.1f} GiB){}", device, prop.name,
                 prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1u << 30),
                 be->fuse_ ? "" : ", op fusion off");
  return std::unique_ptr<Backend>(std::move(be));
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);  // (a group's backends are destroyed from one thread)
  if (stream_) cudaStreamSynchronize(stream_);
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
  for (void* p : graveyard_) cudaFree(p);
  for (void* p : weights_) cudaFree(p);
  for (Scratch* s : {&meta_, &xconv_, &attn_ws_, &staging_, &step_dev_, &qdeq_, &xq_, &split_, &qgemm_x_})
    if (s->p) cudaFree(s->p);
  if (iota_) cudaFree(iota_);
  if (order_) cudaFree(order_);
  if (argmax_dev_) cudaFree(argmax_dev_);
  if (argmax_host_) cudaFreeHost(argmax_host_);
  if (argmax_scratch_) cudaFree(argmax_scratch_);
  for (int i = 0; i < 2; ++i) {
    if (argmax_slot_host_[i]) cudaFreeHost(argmax_slot_host_[i]);
    if (argmax_slot_event_[i]) cudaEventDestroy(argmax_slot_event_[i]);
  }
  if (sample_dev_) cudaFree(sample_dev_);
  if (sample_host_) cudaFreeHost(sample_host_);
  if (meta_host_) cudaFreeHost(meta_host_);
  if (meta_event_) cudaEventDestroy(meta_event_);
  if (lt_ws_) cudaFree(lt_ws_);
  for (int i = 0; i < kSideStreams; ++i) {
    if (side_[i]) cudaStreamSynchronize(side_[i]);
    if (side_ws_[i]) cudaFree(side_ws_[i]);
    if (join_event_[i]) cudaEventDestroy(join_event_[i]);
    if (side_[i]) cudaStreamDestroy(side_[i]);
  }
  if (fork_event_) cudaEventDestroy(fork_event_);
  lt_.reset();
  if (stream_) cudaStreamDestroy(stream_);
  // Last: graphs that captured its all-reduces hold on to the communicator, and its
  // destruction waits for them to go.
  if (nccl_comm_) nccl_comm_destroy(nccl_comm_);
  for (void* p : p2p_buffers_) cudaFree(p);
  if (hold_gate_words_) cudaFree(hold_gate_words_);
  if (attn_o_counters_) cudaFree(attn_o_counters_);
}

uint64_t CudaBackend::hold_gate_timeouts() {
  if (!hold_gate_words_) return 0;
  flush();
  uint32_t n = 0;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(&n, hold_gate_words_ + 2, sizeof(n), cudaMemcpyDeviceToHost, stream_));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return n;
}

std::unique_ptr<Buffer> CudaBackend::alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes > 0 && cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    EMBER_LOG_ERROR("cuda backend: cannot allocate {} bytes", bytes);
    return nullptr;
  }
  return std::make_unique<CudaBuffer>(p, bytes);
}

void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  flush();
  if (bytes == 0) return;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::download(void* dst, const void* src, size_t bytes) {
  flush();
  if (bytes == 0) return;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  flush();
  if (bytes == 0) return;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::synchronize() {
  flush();
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// Uploads host rows in chunks of at most kStagingBytes: plain types are copied as stored and
// converted on the GPU; quantized types are dequantized to F32 on the host first (threaded).
Status CudaBackend::upload_converted(const Tensor& host, Tensor& dst) {
  const int64_t rows = host.n_rows(), cols = host.n_cols();
  const bool plain = host.dtype == DType::F32 || host.dtype == DType::F16 || host.dtype == DType::BF16;
  const size_t src_row_bytes = plain ? host.row_bytes() : static_cast<size_t>(cols) * sizeof(float);
  const DType src_type = plain ? host.dtype : DType::F32;
  const int64_t chunk_rows = std::max<int64_t>(1, static_cast<int64_t>(kStagingBytes / std::max<size_t>(src_row_bytes, 1)));
  std::vector<float> deq;
  const auto pool = dequant_pool(host, plain);
  auto* dst_bytes = static_cast<uint8_t*>(dst.data);
  const size_t dst_row_bytes = dst.row_bytes();
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t nr = std::min(chunk_rows, rows - r0);
    const void* src = host_rows(host, plain, r0, nr, deq, pool.get());
    const size_t bytes = static_cast<size_t>(nr) * src_row_bytes;
    if (src_type == dst.dtype) {
      EMBER_CUDA_TRY(cudaMemcpyAsync(dst_bytes + r0 * dst_row_bytes, src, bytes, cudaMemcpyHostToDevice, stream_));
    } else {
      void* stage = scratch(staging_, bytes);
      EMBER_CUDA_TRY(cudaMemcpyAsync(stage, src, bytes, cudaMemcpyHostToDevice, stream_));
      EMBER_CUDA_TRY(launch_convert(src_type, stage, dst.dtype, dst_bytes + r0 * dst_row_bytes, nr * cols, stream_));
    }
    // The staging buffer and the host chunk are reused by the next iteration.
    EMBER_CUDA_TRY(cudaStreamSynchronize(stream_));
  }
  return Status::ok();
}

// Rows of a 2-D host matrix -> packed int4 / fp8 / int8 at dst, in chunks of whole 16-row tiles:
// plain types are copied as stored, quantized types dequantized to F32 on the host first.
Status CudaBackend::upload_packed(const Tensor& host, QFormat f, void* dst) {
  const int64_t rows = host.n_rows(), cols = host.n_cols();
  const bool plain = host.dtype == DType::F32 || host.dtype == DType::F16 || host.dtype == DType::BF16;
  const size_t src_row_bytes = plain ? host.row_bytes() : static_cast<size_t>(cols) * sizeof(float);
  const int src_type = !plain || host.dtype == DType::F32 ? 0 : host.dtype == DType::F16 ? 1 : 2;
  int64_t chunk_rows = std::max<int64_t>(16, static_cast<int64_t>(kStagingBytes / std::max<size_t>(src_row_bytes, 1)));
  chunk_rows = chunk_rows / 16 * 16;
  std::vector<float> deq;
  const auto pool = dequant_pool(host, plain);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t nr = std::min(chunk_rows, rows - r0);
    const void* src = host_rows(host, plain, r0, nr, deq, pool.get());
    const size_t bytes = static_cast<size_t>(nr) * src_row_bytes;
    void* stage = scratch(staging_, bytes);
    EMBER_CUDA_TRY(cudaMemcpyAsync(stage, src, bytes, cudaMemcpyHostToDevice, stream_));
    EMBER_CUDA_TRY(launch_qweight_pack(f, src_type, stage, r0, nr, rows, cols, dst, stream_));
    EMBER_CUDA_TRY(cudaStreamSynchronize(stream_));  // staging and the host chunk are reused
  }
  return Status::ok();
}

Status CudaBackend::set_weight_format(const std::string& name) {
  if (name == "auto" || name == "bf16" || name.empty()) weight_format_ = -1;
  else if (name == "int4") weight_format_ = static_cast<int>(QFormat::Int4);
  else if (name == "fp8" || name == "fp8_e4m3") weight_format_ = static_cast<int>(QFormat::Fp8);
  else if (name == "int8") weight_format_ = static_cast<int>(QFormat::Int8);
  else return Status::errorf("unknown weight format '{}' (auto, bf16, int4, fp8, int8)", name);
  return Status::ok();
}

Result<Tensor> CudaBackend::prepare_weight(const Tensor& host) {
  flush();
  if (host.device == Device::CUDA) return host;
  if (!quant::can_dequantize(host.dtype))
    return Status::errorf("cuda backend: cannot load weights of dtype {}", dtype_name(host.dtype));
  if (host.n_cols() % dtype_block_size(host.dtype) != 0)
    return Status::errorf("cuda backend: rows of {} elements are not whole {} blocks", host.n_cols(),
                          dtype_name(host.dtype));
  if (weight_format_ >= 0 && host.n_dims == 2 && host.n_cols() % 8 == 0 && host.n_rows() > 0) {
    // Weight-only int4 / fp8 / int8: quantized on the GPU from the (host-dequantized) rows.
    const auto f = static_cast<QFormat>(weight_format_);
    const size_t bytes = qweight_bytes(f, host.n_rows(), host.n_cols());
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return Status::errorf("cuda backend: out of device memory for a {} weight of {} bytes",
                            shape_string(host), bytes);
    }
    weights_.push_back(p);
    EMBER_RETURN_IF_ERROR(upload_packed(host, f, p));
    Tensor dst = host;
    dst.device = Device::CUDA;
    dst.dtype = f == QFormat::Int4 ? DType::Q4_0 : f == QFormat::Int8 ? DType::Q8_0 : DType::FP8_E4M3;
    dst.data = p;
    return dst;
  }
  // Matrices become BF16 (what the GEMV and cuBLASLt read); vectors (norms, biases) stay F32.
  Tensor dst = host;
  dst.device = Device::CUDA;
  dst.dtype = host.n_dims <= 1 ? DType::F32 : DType::BF16;
  const size_t bytes = dst.nbytes();
  void* p = nullptr;
  if (bytes > 0) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return Status::errorf("cuda backend: out of device memory for a {} weight of {} bytes",
                            shape_string(host), bytes);
    }
    weights_.push_back(p);
  }
  dst.data = p;
  EMBER_RETURN_IF_ERROR(upload_converted(host, dst));
  return dst;
}

void CudaBackend::get_rows(const Tensor& table, const int32_t* ids, int n, Tensor& out) {
  flush();
  require(out, DType::F32, "get_rows out");
  const int64_t d = table.n_cols();
  EMBER_CHECK(out.n_cols() == d && out.n_rows() >= n, "get_rows: out {} for {} rows of {}",
              shape_string(out), n, d);
  for (int i = 0; i < n; ++i)
    EMBER_CHECK(ids[i] >= 0 && ids[i] < table.n_rows(), "get_rows: id {} out of range", ids[i]);
  if (n == 0) return;
  if (table.device == Device::CPU) {
    // Host table (e.g. a vocabulary kept off the GPU): gather and dequantize here.
    if (capturing_) {
      capture_failed_ = true;  // a host gather cannot be replayed
      return;
    }
    std::vector<float> rows(static_cast<size_t>(n * d));
    for (int i = 0; i < n; ++i)
      quant::dequantize_row(table.dtype, table.row_ptr(ids[i]), rows.data() + i * d, d);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(out.data, rows.data(), rows.size() * sizeof(float),
                                     cudaMemcpyHostToDevice, stream_));
    return;
  }
  MetaRef r{ids, sizeof(int32_t) * static_cast<size_t>(n)};
  resolve({&r});
  if (is_packed(table)) {
    EMBER_CUDA_CHECK(launch_qweight_dequant(qformat_of(table.dtype), table.data, table.n_rows(), d,
                                            static_cast<const int32_t*>(r.dev), 0, n, out.data,
                                            /*out_bf16=*/false, /*pdl=*/true, stream_));
    return;
  }
  EMBER_CUDA_CHECK(launch_get_rows(table.data, table.dtype, static_cast<const int32_t*>(r.dev), n,
                                   d, out.as<float>(), stream_, /*pdl=*/true));
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  require(x, DType::F32, "rms_norm x");
  require(out, DType::F32, "rms_norm out");
  EMBER_CHECK(w.valid() && w.device == Device::CUDA, "rms_norm weight must be a CUDA tensor");
  const int64_t d = x.n_cols();
  EMBER_CHECK(w.numel() == d && out.numel() == x.numel(), "rms_norm: x {} w {} out {}",
              shape_string(x), shape_string(w), shape_string(out));
  PendingNorm pn;
  pn.x = x.as<float>();
  if (pa_.active && pa_.out == x.data && pa_.n == x.numel()) {
    // The residual add just before, and this norm of its sum: one kernel.
    pa_.active = false;
    pn.x = pa_.a;
    pn.b = pa_.b;
    pn.sum = pa_.out;
  }
  flush();
  pn.w = w.data;
  pn.w_type = w.dtype;
  pn.eps = eps;
  pn.out = out.as<float>();
  pn.rows = x.n_rows();
  pn.d = d;
  // Rows past the GEMV wait for the next op: a GEMM of out takes its x rows from this kernel.
  // A plain norm of GEMV rows waits too: a packed GEMV of out folds it into its x staging
  // (before a BF16 GEMV it launches alone: gemv_takes_pending_norm).
  pn.active = fuse_ && (pn.rows > kQGemvMaxBatch ||
                        (fold_norm_ && !pn.b && (w.dtype == DType::F32 || w.dtype == DType::BF16) &&
                         !overlaps(out.data, out.nbytes(), x.data, x.nbytes()) &&
                         xnorm_supported(static_cast<int>(pn.rows), d, x.data, out.data, w.data, w.dtype == DType::BF16)));
  if (pn.active) pn_ = pn;
  else launch_norm(pn);
}

void CudaBackend::launch_norm(const PendingNorm& pn) {
  if (pn.b)
    EMBER_CUDA_CHECK(launch_add_rms_norm(pn.x, pn.b, pn.sum, pn.w, pn.w_type, pn.eps, pn.out, pn.rows, pn.d, stream_,
                                         /*pdl=*/true, (pdl_early_ & 2) != 0));
  else
    EMBER_CUDA_CHECK(
        launch_rms_norm(pn.x, pn.w, pn.w_type, pn.eps, pn.out, pn.rows, pn.d, stream_, /*pdl=*/true, (pdl_early_ & 2) != 0));
}

const float* CudaBackend::check_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  require(x, DType::F32, "matmul x");
  require(out, DType::F32, "matmul out");
  EMBER_CHECK(w.valid() && w.device == Device::CUDA, "matmul weight must be prepared for CUDA");
  const int64_t n = x.n_rows(), k = x.n_cols(), m = w.n_rows();
  EMBER_CHECK(w.n_cols() == k && out.n_rows() == n && out.n_cols() == m,
              "matmul: x {} w {} out {}", shape_string(x), shape_string(w), shape_string(out));
  if (!bias || !bias->valid()) return nullptr;
  require(*bias, DType::F32, "matmul bias");
  EMBER_CHECK(bias->numel() == m, "matmul: bias {} for {} outputs", shape_string(*bias), m);
  return bias->as<float>();
}

void CudaBackend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const float* b = check_matmul(x, w, bias, out);
  const int64_t n = x.n_rows(), k = x.n_cols(), m = w.n_rows();
  if (n == 0 || m == 0) return;
  if (k > 0 && fp8_large(x, w)) {
    const Fp8Rows xq = fp8_rows_of(x);
    if (fp8_gemm_split_k(xq, w, b, out) || fp8_gemm(xq, w, b, out)) return;
    EMBER_CHECK(xq.x_written, "matmul: no FP8 GEMM, and x was hinted read-once (only its e4m3 rows exist)");
    flush();
  }
  const bool bf16_gemv = w.dtype == DType::BF16 && n <= kGemvMaxBatch &&
                         gemv_supported(static_cast<int>(n), k, x.data, w.data);
  if (k > 0 && w.dtype == DType::BF16 && !bf16_gemv) {
    // cuBLASLt on BF16 rows of x, which x's pending producer may write in its own kernel.
    const void* xb = bf16_rows_of(x);
    flush();
    const Status st = lt_->matmul(DType::BF16, xb, w.data, out.data, n, m, k, lt_ws_, kLtWorkspaceBytes, stream_);
    EMBER_CHECK(st.is_ok(), "matmul: {}", st.message());
    if (b) EMBER_CUDA_CHECK(launch_add_bias(out.as<float>(), b, n, m, stream_));
    return;
  }
  if (k > 0 && gemm_over_direct_gemv(x, w)) {
    matmul_packed_large(x, w, b, out);
    return;
  }
  // x's producer runs before a GEMV reads x, unless it is a norm the GEMV folds in (try_defer_gemv).
  if (pgl_.active || (pn_.active && pn_.out != x.data)) flush();
  if (k > 0 && try_defer_gemv(x, w, b, out)) return;
  flush();
  if (k == 0) {
    EMBER_CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.nbytes(), stream_));
    if (b) EMBER_CUDA_CHECK(launch_add_bias(out.as<float>(), b, n, m, stream_));
    return;
  }
  if (is_packed(w)) {
    if (n <= kQGemvMaxBatch && qgemv_supported(static_cast<int>(n), k, x.data)) {
      QGemvSeg seg;
      seg.w = w.data;
      seg.bias = b;
      seg.out = out.as<float>();
      seg.m = m;
      EMBER_CUDA_CHECK(launch_qgemv_multi(qformat_of(w.dtype), &seg, 1, x.as<float>(), static_cast<int>(n),
                                          k, /*pdl=*/true, stream_));
    } else {
      matmul_packed_large(x, w, b, out);
    }
    return;
  }
  if (bf16_gemv) {
    EMBER_CUDA_CHECK(launch_gemv_bf16(w.data, x.as<float>(), b, out.as<float>(), static_cast<int>(n),
                                      m, k, gemv_variant(static_cast<int>(n), m, k), /*pdl=*/true, stream_));
    return;
  }
  EMBER_CHECK(w.dtype == DType::F32, "matmul: CUDA weights must be BF16 or F32, got {}", dtype_name(w.dtype));
  const Status st = lt_->matmul(DType::F32, x.data, w.data, out.as<float>(), n, m, k, lt_ws_,
                                kLtWorkspaceBytes, stream_);
  EMBER_CHECK(st.is_ok(), "matmul: {}", st.message());
  if (b) EMBER_CUDA_CHECK(launch_add_bias(out.as<float>(), b, n, m, stream_));
}

// Several matrices of one x past the GEMV (q/k/v, gate/up), FP8 (packed) or BF16: x is
// quantized or converted once for all of them, and at decode batch sizes the GEMMs run side by
// side (side_ streams). Two matrices without biases (gate / up) wait for the next op: a glu of
// their outputs takes them as BF16 (glu).
void CudaBackend::matmul_many(const Tensor& x, std::span<const MatmulTarget> targets) {
  const bool shared_x = targets.size() > 1 && targets.size() <= kMaxGemmJobs && x.valid() &&
                        x.device == Device::CUDA && x.dtype == DType::F32;
  bool fp8 = shared_x, bf16 = shared_x && x.n_rows() > kGemvMaxBatch && x.n_cols() > 0;
  for (const MatmulTarget& t : targets) {
    fp8 = fp8 && fp8_large(x, *t.w);
    bf16 = bf16 && t.w->device == Device::CUDA && t.w->dtype == DType::BF16;
  }
  if (!fp8 && !bf16) {
    if (shared_x && stage_x_once_ && packed_gemm_many(x, targets)) return;
    Backend::matmul_many(x, targets);
    return;
  }
  GemmJob jobs[kMaxGemmJobs];
  const int count = static_cast<int>(targets.size());
  for (int i = 0; i < count; ++i) {
    const MatmulTarget& t = targets[static_cast<size_t>(i)];
    jobs[i] = GemmJob{*t.w, check_matmul(x, *t.w, t.bias, *t.out), t.out->data};
  }
  Fp8Rows xq{};
  const void* xb = nullptr;
  if (fp8) xq = fp8_rows_of(x);
  else xb = bf16_rows_of(x);
  const int64_t n = x.n_rows(), m = jobs[0].w.n_rows();
  if (fuse_ && lean_glu_ && bf16_gemm_out_ok_ && (!fp8 || fp8_outer_ok_) && count == 2 && !jobs[0].bias &&
      !jobs[1].bias && jobs[1].w.n_rows() == m &&
      !overlaps(jobs[0].out, static_cast<size_t>(n * m) * 4, jobs[1].out, static_cast<size_t>(n * m) * 4)) {
    flush();  // whatever was pending runs before these GEMMs
    pgm_ = PendingGemms{true, x, xq, xb, {jobs[0], jobs[1]}};
    return;
  }
  run_gemms(x, fp8 ? &xq : nullptr, xb, jobs, count);
}

bool CudaBackend::run_gemms(const Tensor& x, const Fp8Rows* xq, const void* xb, const GemmJob* jobs, int count,
                            bool out_bf16) {
  const int64_t n = x.n_rows(), k = x.n_cols();
  // One GEMM on `stream`; false when cuBLASLt has no FP8 GEMM (then dequantized, on stream_),
  // or (out_bf16) none with BF16 output.
  auto gemm = [&](int i, cudaStream_t stream, void* ws) {
    const GemmJob& j = jobs[i];
    const int64_t m = j.w.n_rows();
    if (xq && out_bf16)
      return lt_->matmul_fp8_scaled(xq->q, j.w.data, j.out, n, m, xq->k_pad, xq->scale, fp8_channel_scales(j.w), ws,
                                    kLtWorkspaceBytes, stream, 0, false, DType::BF16)
          .is_ok();
    if (out_bf16)
      return lt_->matmul(DType::BF16, xb, j.w.data, j.out, n, m, k, ws, kLtWorkspaceBytes, stream, 0, 0, 0, false,
                         DType::BF16)
          .is_ok();
    Tensor out = make_tensor(j.out, DType::F32, {n, m}, Device::CUDA);
    if (xq) return fp8_gemm(*xq, j.w, j.bias, out, stream, ws);
    const Status st = lt_->matmul(DType::BF16, xb, j.w.data, out.as<float>(), n, m, k, ws, kLtWorkspaceBytes, stream);
    EMBER_CHECK(st.is_ok(), "matmul: {}", st.message());
    if (j.bias) EMBER_CUDA_CHECK(launch_add_bias(out.as<float>(), j.bias, n, m, stream));
    return true;
  };
  // Side by side while the GEMMs are small enough to leave SMs idle (decode batches); a
  // prefill chunk's GEMMs fill the GPU one at a time.
  const int n_side = concurrent_gemms_ && n <= kConcurrentGemmMaxRows ? std::min(count - 1, kSideStreams) : 0;
  if (n_side > 0) EMBER_CUDA_CHECK(cudaEventRecord(fork_event_, stream_));
  for (int i = 0; i < count; ++i) {
    const int side = i >= 1 && i <= n_side ? i - 1 : -1;
    if (side >= 0) EMBER_CUDA_CHECK(cudaStreamWaitEvent(side_[side], fork_event_, 0));
    const bool done = side >= 0 ? gemm(i, side_[side], side_ws_[side]) : gemm(i, stream_, lt_ws_);
    if (!done && out_bf16) {
      // The first GEMM declined before anything ran (the others take the same plan): the
      // caller runs them all with F32 output. Side streams have not forked yet.
      EMBER_CHECK(i == 0, "matmul: cuBLASLt took the first BF16-output GEMM but not GEMM {}", i);
      EMBER_LOG_WARN("cuda backend: no cuBLASLt GEMM with BF16 output; gate / up stay F32");
      bf16_gemm_out_ok_ = false;
      return false;
    }
    if (!done) {
      Tensor out = make_tensor(jobs[i].out, DType::F32, {n, jobs[i].w.n_rows()}, Device::CUDA);
      EMBER_CHECK(!xq || xq->x_written, "matmul: no FP8 GEMM, and x was hinted read-once (only its e4m3 rows exist)");
      matmul_packed_large(x, jobs[i].w, jobs[i].bias, out);
    }
    if (side >= 0) EMBER_CUDA_CHECK(cudaEventRecord(join_event_[side], side_[side]));
  }
  for (int i = 0; i < n_side; ++i) EMBER_CUDA_CHECK(cudaStreamWaitEvent(stream_, join_event_[i], 0));
  return true;
}

// The per-channel scales [m] F32 that follow a packed FP8 matrix's e4m3 rows.
const float* CudaBackend::fp8_channel_scales(const Tensor& w) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(w.data) +
                                        qweight_scales_offset(QFormat::Fp8, w.n_rows(), w.n_cols()));
}

// Packed FP8 weights and more rows than the GEMV takes: cuBLASLt's FP8 GEMM on e4m3 rows of x.
bool CudaBackend::fp8_large(const Tensor& x, const Tensor& w) const {
  const int64_t n = x.n_rows(), k = x.n_cols();
  return fp8_lt_ok_ && is_packed(w) && w.dtype == DType::FP8_E4M3 && w.n_rows() % 4 == 0 && n > 0 && k > 0 &&
         !(n <= kQGemvMaxBatch && qgemv_supported(static_cast<int>(n), k, x.data));
}

bool CudaBackend::rows_from_producer(const Tensor& x, const GemmRowsOut& ro, bool* only_rows) {
  const int64_t n = x.n_rows(), k = x.n_cols();
  // A producer hinted read-once writes only the GEMM's rows.
  const bool once = take_read_once(x.data, static_cast<size_t>(n * k) * sizeof(float));
  cudaError_t e = cudaErrorNotSupported;
  if (pn_.active && pn_.out == x.data && pn_.rows == n && pn_.d == k) {
    e = launch_rms_norm_rows(pn_.x, pn_.b, pn_.sum, pn_.w, pn_.w_type, pn_.eps, once ? nullptr : pn_.out, n, k, ro,
                             stream_, /*pdl=*/true, (pdl_early_ & 2) != 0);
    if (e != cudaErrorNotSupported) pn_.active = false;
  } else if (pgl_.active && pgl_.out == x.data && pgl_.rows == n && pgl_.cols == k) {
    e = launch_glu_rows(pgl_.in_type, pgl_.gate, pgl_.up, pgl_.gelu_tanh, once ? nullptr : pgl_.out, n, k, &ro,
                        stream_, /*pdl=*/true);
    if (e != cudaErrorNotSupported) pgl_.active = false;
  }
  if (e == cudaErrorNotSupported) return false;
  EMBER_CUDA_CHECK(e);
  *only_rows = once;
  return true;
}

// x [n, k] F32 -> e4m3 [n, k_pad] with one scale per row, in the xq_ scratch: written by the
// pending RMSNorm or GLU that produces x (one kernel for both), else quantized from x after
// what is pending has launched.
CudaBackend::Fp8Rows CudaBackend::fp8_rows_of(const Tensor& x) {
  if (pgm_.active) flush();  // held-back GEMMs read the scratch this reuses
  const int64_t n = x.n_rows(), k = x.n_cols();
  const int64_t k_pad = qweight_k_pad(QFormat::Fp8, k);
  const size_t xq_bytes = (static_cast<size_t>(n * k_pad) + 255) / 256 * 256;
  auto* xq = static_cast<uint8_t*>(scratch(xq_, xq_bytes + static_cast<size_t>(n) * sizeof(float)));
  auto* x_scale = reinterpret_cast<float*>(xq + xq_bytes);
  GemmRowsOut ro;
  ro.fq = Fp8RowsOut{xq, x_scale, k_pad};
  bool only_rows = false;
  if (!rows_from_producer(x, ro, &only_rows)) {
    flush();
    EMBER_CUDA_CHECK(launch_quantize_rows_fp8(x.as<float>(), n, k, k_pad, xq, x_scale, stream_));
  }
  return Fp8Rows{xq, x_scale, n, k_pad, !only_rows};
}

// x [n, k] F32 -> BF16 [n, k] in the xconv_ scratch (the BF16 GEMMs' x): from x's pending
// producer, else converted after what is pending. (Callers never fall back to x itself, so a
// producer hinted read-once may leave x unwritten.)
const void* CudaBackend::bf16_rows_of(const Tensor& x) {
  if (pgm_.active) flush();  // held-back GEMMs read the scratch this reuses
  const int64_t n = x.n_rows(), k = x.n_cols();
  void* xb = scratch(xconv_, static_cast<size_t>(n * k) * 2);
  GemmRowsOut ro;
  ro.bf16 = xb;
  bool only_rows = false;
  if (!rows_from_producer(x, ro, &only_rows)) {
    flush();
    EMBER_CUDA_CHECK(launch_convert(DType::F32, x.data, DType::BF16, xb, n * k, stream_));
  }
  return xb;
}

bool CudaBackend::take_read_once(const void* p, size_t bytes) {
  for (int i = 0; i < n_read_once_; ++i) {
    if (read_once_[i].p != p || read_once_[i].bytes != bytes) continue;
    read_once_[i] = read_once_[--n_read_once_];
    return true;
  }
  return false;
}

void CudaBackend::hint_read_once(const Tensor& t) {
  if (!lean_glu_ || !t.valid() || t.device != Device::CUDA) return;
  if (n_read_once_ == kMaxReadOnce) {  // the oldest hint goes (hints only ever skip work)
    std::move(read_once_ + 1, read_once_ + kMaxReadOnce, read_once_);
    --n_read_once_;
  }
  read_once_[n_read_once_++] = ByteRange{t.data, t.nbytes()};
}

// out = (x @ w^T) scaled by x's row scales and w's channel scales (+ bias), through cuBLASLt's
// FP8 GEMM: the scales inside it (outer-vector scaling) where cuBLASLt offers that, else in a
// kernel after it. False when cuBLASLt has no FP8 GEMM at all (the caller dequantizes).
bool CudaBackend::fp8_gemm(const Fp8Rows& xq, const Tensor& w, const float* bias, Tensor& out, cudaStream_t stream,
                           void* workspace) {
  if (!stream) stream = stream_;
  if (!workspace) workspace = lt_ws_;
  const int64_t n = xq.n, m = w.n_rows();
  const float* w_scale = fp8_channel_scales(w);
  if (fp8_outer_ok_) {
    const Status st = lt_->matmul_fp8_scaled(xq.q, w.data, out.as<float>(), n, m, xq.k_pad, xq.scale, w_scale,
                                             workspace, kLtWorkspaceBytes, stream);
    if (st.is_ok()) {
      if (bias) EMBER_CUDA_CHECK(launch_add_bias(out.as<float>(), bias, n, m, stream));
      return true;
    }
    EMBER_LOG_WARN("cuda backend: no cuBLASLt FP8 GEMM with per-row scales ({}); scaling after the GEMM",
                   st.message());
    fp8_outer_ok_ = false;
  }
  const Status st = lt_->matmul(DType::FP8_E4M3, xq.q, w.data, out.as<float>(), n, m, xq.k_pad, workspace,
                                kLtWorkspaceBytes, stream);
  if (st.is_ok()) {
    EMBER_CUDA_CHECK(launch_scale_rows_cols(out.as<float>(), n, m, m, xq.scale, w_scale, bias, stream));
    return true;
  }
  EMBER_LOG_WARN("cuda backend: no cuBLASLt FP8 GEMM ({}); FP8 weights take dequantized BF16 GEMMs", st.message());
  fp8_lt_ok_ = false;
  return false;
}

bool CudaBackend::fp8_gemm_split_k(const Fp8Rows& xq, const Tensor& w, const float* bias, Tensor& out,
                                   bool accumulate) {
  const int64_t n = xq.n, m = w.n_rows(), k = xq.k_pad, half = k / 2;
  const int64_t tiles = ((m + 127) / 128) * ((n + 127) / 128);  // cuBLASLt's 128 x 128 tiles
  if (!concurrent_gemms_ || !fp8_outer_ok_ || n > kConcurrentGemmMaxRows || k < kSplitKMinK || half % 16 != 0 ||
      2 * tiles > num_sms_)
    return false;
  flush();  // a pending add of its own becomes the new one below
  const auto* w8 = static_cast<const uint8_t*>(w.data);
  const float* w_scale = fp8_channel_scales(w);
  auto* part = static_cast<float*>(scratch(split_, static_cast<size_t>(n * m) * sizeof(float)));
  EMBER_CUDA_CHECK(cudaEventRecord(fork_event_, stream_));
  Status st = lt_->matmul_fp8_scaled(xq.q, w8, out.as<float>(), n, m, half, xq.scale, w_scale, lt_ws_,
                                     kLtWorkspaceBytes, stream_, k, accumulate);
  // Declined before anything ran (no outer-vector scaling on this GPU): the caller's one GEMM
  // finds out and falls back. The side stream has not joined yet, so a capture stays whole.
  if (!st.is_ok()) return false;
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(side_[0], fork_event_, 0));
  st = lt_->matmul_fp8_scaled(xq.q + half, w8 + half, part, n, m, k - half, xq.scale, w_scale, side_ws_[0],
                              kLtWorkspaceBytes, side_[0], k);
  EMBER_CUDA_CHECK(cudaEventRecord(join_event_[0], side_[0]));
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(stream_, join_event_[0], 0));
  EMBER_CHECK(st.is_ok(), "matmul (split k): {}", st.message());
  if (bias) EMBER_CUDA_CHECK(launch_add_bias(out.as<float>(), bias, n, m, stream_));
  if (fuse_) {
    pa_ = PendingAdd{true, out.as<float>(), part, out.as<float>(), n * m};
  } else {
    EMBER_CUDA_CHECK(launch_add(out.as<float>(), part, out.as<float>(), n * m, stream_));
  }
  return true;
}

// acc += x @ w^T in the GEMM (cuBLASLt reads acc as C) for the GEMM paths: packed FP8 with
// the scales inside the GEMM, and BF16; in the packed GEMV's epilogue for a few rows (each
// output read and written by one thread), so that an RMSNorm of acc next is a plain norm,
// which the GEMV after it folds in. The BF16 GEMV declines (its add joins the norm after).
bool CudaBackend::matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& acc) {
  if (!fuse_ || !accumulate_gemms_ || !x.valid() || x.device != Device::CUDA || x.dtype != DType::F32 || !acc.valid() ||
      acc.device != Device::CUDA || acc.dtype != DType::F32)
    return false;
  check_matmul(x, w, nullptr, acc);
  if (pat_.active && attn_o_project(x, w, acc)) return true;
  const int64_t n = x.n_rows(), k = x.n_cols(), m = w.n_rows();
  if (n == 0 || m == 0 || k == 0 ||
      overlaps(acc.data, acc.nbytes(), x.data, static_cast<size_t>(n * k) * sizeof(float)))
    return false;
  if ((n > kQGemvMaxBatch || gemm_over_direct_gemv(x, w)) && packed_gemm_takes(x, w)) {
    flush();  // x's producer and a pending add into acc land first
    packed_gemm(x, w, nullptr, acc.as<float>(), /*accumulate=*/true);
    return true;
  }
  if (is_packed(w) && n <= kQGemvMaxBatch && qgemv_supported(static_cast<int>(n), k, x.data)) {
    if (!fold_norm_) return false;
    if (pgl_.active || (pn_.active && pn_.out != x.data)) flush();
    return try_defer_gemv(x, w, nullptr, acc, /*accumulate=*/true);
  }
  if (fp8_large(x, w)) {
    if (!fp8_outer_ok_) return false;
    const Fp8Rows xq = fp8_rows_of(x);
    if (fp8_gemm_split_k(xq, w, nullptr, acc, /*accumulate=*/true)) return true;
    flush();  // a pending add into acc lands before the GEMM reads acc
    const Status st = lt_->matmul_fp8_scaled(xq.q, w.data, acc.as<float>(), n, m, xq.k_pad, xq.scale,
                                             fp8_channel_scales(w), lt_ws_, kLtWorkspaceBytes, stream_, 0,
                                             /*accumulate=*/true);
    // Declined: the caller's matmul + add need x, which a read-once producer left unwritten.
    EMBER_CHECK(st.is_ok() || xq.x_written, "matmul_accumulate: {} (and x exists only as e4m3 rows)", st.message());
    return st.is_ok();
  }
  if (is_packed(w) || w.dtype != DType::BF16 || n <= kGemvMaxBatch) return false;
  const void* xb = bf16_rows_of(x);
  const Status st = lt_->matmul(DType::BF16, xb, w.data, acc.as<float>(), n, m, k, lt_ws_, kLtWorkspaceBytes,
                                stream_, 0, 0, 0, /*accumulate=*/true);
  EMBER_CHECK(st.is_ok(), "matmul: {}", st.message());
  return true;
}

namespace {

// attn_o_one_wave_'s key: the o projection's format and rows, the attention's shape.
std::tuple<int, int, int, int, int, int, int64_t> attn_o_wave_key(int format, const PagedAttnArgs& g, int64_t m) {
  return std::make_tuple(format, static_cast<int>(g.kv_type), g.n_heads, g.n_kv_heads, g.max_kv, g.block_size, m);
}

}  // namespace

bool CudaBackend::attn_o_project(const Tensor& x, const Tensor& w, Tensor& acc) {
  const PagedAttnArgs& g = pat_.args;
  if (x.data != g.out || x.n_rows() != 1 || x.n_cols() != static_cast<int64_t>(g.n_heads) * g.head_dim ||
      !(w.dtype == DType::Q4_0 || w.dtype == DType::FP8_E4M3) || acc.numel() != w.n_rows())
    return false;
  const QFormat f = qformat_of(w.dtype);
  const AttnOArgs a{g, f, w.data, w.n_rows(), acc.as<float>(), attn_o_threads_, f == QFormat::Int4 ? attn_o_rows_ : 32};
  AttnOSplitArgs sa{g, f, w.data, w.n_rows(), acc.as<float>(), nullptr, attn_o_counters_};
  if (!(attn_o_ == 2 ? attn_o_split_ready(sa) : attn_o_one_wave_ready(a))) return false;
  pat_.active = false;
  flush();  // (nothing else is pending after an attention: its own call flushed the rest)
  EMBER_CUDA_CHECK(attn_o_ == 2 ? launch_attn_o_split(sa, stream_) : launch_attn_o(a, stream_));
  ++attn_o_launches_;
  last_gemv_wtype_ = w.dtype;
  return true;
}

bool CudaBackend::attn_o_one_wave_ready(const AttnOArgs& a) {
  attn_o_last_format_ = static_cast<int>(a.format);
  attn_o_last_m_ = a.m;
  if (!attn_o_takes(a)) return false;
  const auto key = attn_o_wave_key(attn_o_last_format_, a.attn, a.m);
  auto it = attn_o_one_wave_.find(key);
  if (it == attn_o_one_wave_.end()) it = attn_o_one_wave_.emplace(key, attn_o_one_wave(a)).first;
  return it->second;
}

bool CudaBackend::attn_o_split_ready(AttnOSplitArgs& a) {
  if (attn_o_split_parts(a) == 0) return false;
  a.part = static_cast<float*>(scratch(attn_o_part_, attn_o_split_part_bytes(a)));
  return attn_o_split_takes(a);
}

bool CudaBackend::attn_o_known_declined(const PagedAttnArgs& g) const {
  if (g.max_kv > kAttnOMaxKeys) return true;
  if (attn_o_last_format_ < 0) return false;
  const auto it = attn_o_one_wave_.find(attn_o_wave_key(attn_o_last_format_, g, attn_o_last_m_));
  return it != attn_o_one_wave_.end() && !it->second;
}

void CudaBackend::launch_attention_group(const PagedAttnArgs& a, AttnKernel kind) {
  const size_t ws_bytes = attention_workspace_bytes(a, kind, num_sms_);
  void* ws = ws_bytes ? scratch(attn_ws_, ws_bytes) : nullptr;
  EMBER_CUDA_CHECK(launch_paged_attention(a, kind, ws, ws_bytes, num_sms_, stream_));
}

// Several int4 / int8 matrices of one x past the GEMV's rows (q / k / v, gate / up): x staged for
// the packed GEMM once, then one GEMM launch each. False (nothing launched) when not all qualify.
bool CudaBackend::packed_gemm_many(const Tensor& x, std::span<const MatmulTarget> targets) {
  if (x.n_rows() <= kQGemvMaxBatch || x.n_cols() == 0) return false;
  const DType wtype = targets[0].w->dtype;
  for (const MatmulTarget& t : targets)
    if (t.w->device != Device::CUDA || t.w->dtype != wtype || !packed_gemm_takes(x, *t.w)) return false;
  const float* biases[kMaxGemmJobs];
  for (size_t i = 0; i < targets.size(); ++i)
    biases[i] = check_matmul(x, *targets[i].w, targets[i].bias, *targets[i].out);
  flush();
  const QFormat f = qformat_of(wtype);
  const int n = static_cast<int>(x.n_rows());
  EMBER_CUDA_CHECK(n <= kQGemmMaxBatch
                       ? launch_qgemm_stage_x(f, x.as<float>(), n, x.n_cols(), packed_gemm_x(f, x), /*pdl=*/true, stream_)
                       : launch_qgemm_wg_stage_x(f, x.as<float>(), n, x.n_cols(), packed_gemm_x(f, x), /*pdl=*/true,
                                                 stream_));
  for (size_t i = 0; i < targets.size(); ++i)
    packed_gemm(x, *targets[i].w, biases[i], targets[i].out->as<float>(), /*accumulate=*/false, /*stage_x=*/false);
  return true;
}

// The packed tensor-core GEMMs take int4 / int8 weights: the mma.sync one (qgemm.cuh) up to
// kQGemmMaxBatch rows, the wgmma one (qgemm_wg.cuh) past that up to 1024 rows (int4) / 384
// (int8). Beyond those, dequantizing for cuBLASLt's BF16 GEMM is faster (H200, one Llama-3-8B
// layer's GEMMs, bench_cuda_kernels qgemm-wg: int4 10% faster than the fallback at 1024 rows,
// 15% slower at 4096; int8 7% faster at 384 rows, 13% slower at 512).
bool CudaBackend::packed_gemm_takes(const Tensor& x, const Tensor& w) const {
  if (!packed_gemm_ || !is_packed(w) || x.n_rows() > (int64_t{1} << 24)) return false;
  const QFormat f = qformat_of(w.dtype);
  const int n = static_cast<int>(x.n_rows());
  if (n <= kQGemmMaxBatch) return n >= 1 && qgemm_supported(f, n, x.n_cols(), x.data);
  const int max_rows = packed_wg_max_rows_ > 0 ? packed_wg_max_rows_ : f == QFormat::Int4 ? 1024 : 384;
  return packed_wg_ && n <= max_rows && qgemm_wg_supported(f, n, x.n_cols(), x.data);
}
// The x scratch of the GEMM that takes x.
void* CudaBackend::packed_gemm_x(QFormat f, const Tensor& x) {
  const int n = static_cast<int>(x.n_rows());
  return scratch(qgemm_x_, n <= kQGemmMaxBatch ? qgemm_x_bytes(f, n, x.n_cols()) : qgemm_wg_x_bytes(f, n, x.n_cols()));
}
// out (+)= x @ w^T (+ bias) on it, after whatever x's producer is has launched; stage_x false:
// x is already staged in the scratch (packed_gemm_many).
void CudaBackend::packed_gemm(const Tensor& x, const Tensor& w, const float* bias, float* out, bool accumulate,
                              bool stage_x) {
  const QFormat f = qformat_of(w.dtype);
  const int n = static_cast<int>(x.n_rows());
  const int64_t k = x.n_cols(), m = w.n_rows();
  if (n <= kQGemmMaxBatch) {
    EMBER_CUDA_CHECK(launch_qgemm(f, w.data, m, k, x.as<float>(), n, bias, out, accumulate,
                                  plan_qgemm(f, n, m, k, num_sms_), packed_gemm_x(f, x), /*pdl=*/true, stream_, stage_x));
    return;
  }
  EMBER_CUDA_CHECK(launch_qgemm_wg(f, w.data, m, k, x.as<float>(), n, bias, out, accumulate,
                                   plan_qgemm_wg(f, n, m, k, num_sms_), packed_gemm_x(f, x), /*pdl=*/true, stream_,
                                   stage_x));
}

// int4 weights and 6-8 rows that the staged GEMV takes only over a cluster or not at all (the
// 4096 x 14336 down projection): the packed GEMM is faster there (H200, session 16: 8 rows 37.7
// -> 26.1 us against the direct kernel; 4 rows level, 22.4 / 22.9, so it starts at 6; 8 x
// 128/256 at concurrency 8 1,527-1,530 -> 1,604-1,683 output tok/s; session 22: the cluster
// split 27.9 us, the GEMM ~26.7 with its x staging in the step). Not int8: there the
// same switch lost 6% end to end (1,475-1,506 -> 1,388-1,410) though the kernel alone gained
// (34.4 -> 31.1 us).
bool CudaBackend::gemm_over_direct_gemv(const Tensor& x, const Tensor& w) const {
  if (!x.valid() || x.dtype != DType::F32 || !packed_gemm_takes(x, w) || w.dtype != DType::Q4_0) return false;
  const int rows = static_cast<int>(x.n_rows());
  const int64_t k = x.n_cols();
  return rows >= 6 && rows <= kQGemvMaxBatch && qgemv_staged_cluster(QFormat::Int4, false, false, rows, k) != 1;
}

// Packed weights, batches past the GEMV, other than FP8 through cuBLASLt's FP8 GEMM (fp8_large,
// fp8_gemm): int4 and int8 through the tensor-core GEMMs that read the weights once
// (packed_gemm_takes); past their rows (or FP8 when cuBLASLt declines) dequantized to BF16 a
// slab of rows at a time, each slab one BF16 cuBLASLt GEMM into its output columns. (int8
// weights with x quantized to int8 per row through an IMMA GEMM for prompts is future work.)
void CudaBackend::matmul_packed_large(const Tensor& x, const Tensor& w, const float* bias, Tensor& out) {
  const QFormat f = qformat_of(w.dtype);
  const int64_t n = x.n_rows(), k = x.n_cols(), m = w.n_rows();
  flush();
  if (packed_gemm_takes(x, w)) {
    packed_gemm(x, w, bias, out.as<float>(), /*accumulate=*/false);
    return;
  }
  static const size_t kSlabBytes = [] {  // EMBER_CUDA_DEQUANT_SLAB_MB: slab size (experiments)
    const char* v = std::getenv("EMBER_CUDA_DEQUANT_SLAB_MB");
    return (v ? std::max<size_t>(1, std::strtoull(v, nullptr, 10)) : 64) << 20;
  }();
  int64_t slab = std::max<int64_t>(16, static_cast<int64_t>(kSlabBytes / (static_cast<size_t>(k) * 2)) / 16 * 16);
  slab = std::min(slab, (m + 15) / 16 * 16);
  const void* xb = bf16_rows_of(x);
  auto* wb = scratch(qdeq_, static_cast<size_t>(slab * k) * 2);
  for (int64_t r0 = 0; r0 < m; r0 += slab) {
    const int64_t nr = std::min(slab, m - r0);
    EMBER_CUDA_CHECK(launch_qweight_dequant(f, w.data, m, k, nullptr, r0, nr, wb, /*out_bf16=*/true,
                                            /*pdl=*/false, stream_));
    const Status st = lt_->matmul(DType::BF16, xb, wb, out.as<float>() + r0, n, nr, k, lt_ws_,
                                  kLtWorkspaceBytes, stream_, k, k, m);
    EMBER_CHECK(st.is_ok(), "matmul: {}", st.message());
  }
  if (bias) EMBER_CUDA_CHECK(launch_add_bias(out.as<float>(), bias, n, m, stream_));
}

void CudaBackend::rope(Tensor& x, const int32_t* positions, const RopeParams& p) {
  require(x, DType::F32, "rope x");
  EMBER_CHECK(x.n_dims == 3 && x.dim(2) == p.head_dim, "rope: x {} head_dim {}", shape_string(x),
              p.head_dim);
  EMBER_CHECK(p.rotary_dim > 0 && p.rotary_dim <= p.head_dim && p.rotary_dim % 2 == 0 && p.inv_freq,
              "rope: rotary_dim {} head_dim {}", p.rotary_dim, p.head_dim);
  const int64_t n = x.dim(0);
  const int n_heads = static_cast<int>(x.dim(1));
  if (pr_.active && !pr_.x2 && pr_.host_positions == positions && pr_.n == n &&
      pr_.host_inv_freq == p.inv_freq && pr_.head_dim == p.head_dim && pr_.rotary_dim == p.rotary_dim &&
      pr_.neox == p.neox && pr_.factor == p.attention_factor && x.as<float>() != pr_.x) {
    // q then k of one step: one launch (at the next op, which may be the cache store).
    pr_.x2 = x.as<float>();
    pr_.n_heads2 = n_heads;
    return;
  }
  // q's rope right after a q/k/v GEMV of one row stays pending beside that GEMV (both
  // are launched in order by the next flush), so that kv_store may put the rope and the store
  // into the GEMV's epilogue: only with the positions in the step metadata and the frequencies
  // in device memory, which need no upload (one would go ahead of the pending GEMV).
  MetaRef pos{positions, sizeof(int32_t) * static_cast<size_t>(n)};
  const bool positions_in_step = lookup(positions, pos.bytes) != nullptr;
  const bool beside_gemv = fuse_ && pg_.count == 3 && gemv_rope_for(pg_.wtype) && pg_.n == 1 &&
                           n == 1 && pg_.segs[0].out == x.as<float>() && !pr_.active && !prs_active_ &&
                           !pgm_.active && !pa_.active && !pn_.active && !pgl_.active && positions_in_step &&
                           on_device(p.inv_freq);
  if (!beside_gemv) flush();
  if (n == 0) return;
  // inv_freq is backend memory when the model uploaded it, host memory otherwise.
  MetaRef freq{p.inv_freq, sizeof(float) * static_cast<size_t>(p.rotary_dim / 2)};
  if (on_device(p.inv_freq)) {
    freq.dev = p.inv_freq;
    resolve({&pos});
  } else {
    resolve({&pos, &freq});
  }
  if (fuse_) {
    pr_ = PendingRope{true, x.as<float>(), n_heads, nullptr, 0, n, positions,
                      static_cast<const int32_t*>(pos.dev), positions_in_step,
                      static_cast<const float*>(freq.dev), p.inv_freq, p.head_dim, p.rotary_dim,
                      p.neox, p.attention_factor};
    return;
  }
  EMBER_CUDA_CHECK(launch_rope(x.as<float>(), static_cast<const int32_t*>(pos.dev),
                               static_cast<const float*>(freq.dev), n, n_heads, p.head_dim,
                               p.rotary_dim, p.neox, p.attention_factor, stream_, /*pdl=*/true));
}

void CudaBackend::kv_store(KvLayer& kv, const Tensor& k, const Tensor& v, const int32_t* slots) {
  require(k, DType::F32, "kv_store k");
  require(v, DType::F32, "kv_store v");
  EMBER_CHECK(kv.k.device == Device::CUDA && kv.v.device == Device::CUDA && kv.k.dtype == kv.v.dtype,
              "kv_store: cache must be CUDA tensors of one dtype");
  const bool i8 = kv.k.dtype == DType::I8;
  EMBER_CHECK(cuda_kv_dtype_supported(kv.k.dtype) && (i8 || (!kv.k_scales && !kv.v_scales)),
              "kv_store: {} K/V cache{} not supported on CUDA (F32/F16/BF16/FP8_E4M3/FP8_E5M2 without scales, "
              "I8 with scales)",
              dtype_name(kv.k.dtype), kv.k_scales ? " with scales" : "");
  // (in device memory, from alloc like the cache; not looked up per call: a pointer query
  // costs microseconds and a model has two per layer)
  EMBER_CHECK(!i8 || (kv.k_scales && kv.v_scales),
              "kv_store: an I8 K/V cache needs per-(slot, head) k_scales and v_scales (device memory)");
  const int64_t n = k.dim(0);
  const int64_t row = kv.k.dim(2) * kv.k.dim(3);  // n_kv_heads * head_dim
  EMBER_CHECK(k.numel() == n * row && v.numel() == n * row, "kv_store: k {} v {} cache {}",
              shape_string(k), shape_string(v), shape_string(kv.k));
  const int64_t n_slots = kv.k.dim(0) * kv.k.dim(1);
  for (int64_t i = 0; i < n; ++i) EMBER_CHECK(slots[i] < n_slots, "kv_store: slot {} out of range", slots[i]);
  // (the slots may be a per-op upload only if the rope's positions and frequencies are not: it
  // would reuse their scratch before the fused kernel has read them)
  const size_t slot_bytes = sizeof(int32_t) * static_cast<size_t>(n);
  const auto* slots_in_step = static_cast<const int32_t*>(lookup(slots, slot_bytes));  // (null: a per-op upload)
  const bool fuse_rope = pr_.active && pr_.x2 == k.data && pr_.n == n && pr_.rotary_dim == pr_.head_dim &&
                         kv.k.dim(3) == pr_.head_dim && kv.k.dim(2) == pr_.n_heads2 && n > 0 &&
                         (slots_in_step || (pr_.positions_in_step && pr_.inv_freq == pr_.host_inv_freq));
  if (fuse_rope && gemv_takes_rope(kv, k.as<float>(), v.as<float>(), n, slots_in_step)) {
    pg_.rope = GemvRope{pr_.positions, pr_.inv_freq, slots_in_step, pr_.factor, pr_.head_dim,
                         kv.k.data, kv.v.data, kv.k.dtype == DType::BF16};
    pr_.active = false;
    flush();  // the GEMV, with the rope and the store
    roped_ = GemvRoped{true, pg_.segs[0].out, kv.k.data, kv.v.data};
    ++gemv_rope_launches_;
    return;
  }
  if (fuse_rope) pr_.active = false;  // launched below, with the store
  flush();
  if (n == 0) return;
  MetaRef r{slots, slot_bytes};
  resolve({&r});
  if (fuse_rope) {
    RopeKvStoreArgs a;
    a.q = pr_.x;
    a.hq = pr_.n_heads;
    a.k = pr_.x2;
    a.v = v.as<float>();
    a.hk = pr_.n_heads2;
    a.positions = pr_.positions;
    a.inv_freq = pr_.inv_freq;
    a.slots = static_cast<const int32_t*>(r.dev);
    a.n = n;
    a.head_dim = pr_.head_dim;
    a.neox = pr_.neox;
    a.factor = pr_.factor;
    a.k_cache = kv.k.data;
    a.v_cache = kv.v.data;
    a.cache_type = kv.k.dtype;
    a.k_scales = kv.k_scales;
    a.v_scales = kv.v_scales;
    // Held for the attention kernel when every pointer stays valid until it runs (step
    // metadata and model buffers, not the per-op upload scratch the next op may reuse).
    const bool keep = attn_rope_ && !i8 && slots_in_step && pr_.positions_in_step &&
                      pr_.inv_freq == pr_.host_inv_freq;
    if (keep) {
      prs_ = a;
      prs_active_ = true;
      return;
    }
    EMBER_CUDA_CHECK(launch_rope_kv_store(a, stream_, /*pdl=*/true));
    return;
  }
  if (i8) {
    EMBER_CUDA_CHECK(launch_kv_store2_i8(k.as<float>(), v.as<float>(), static_cast<const int32_t*>(r.dev),
                                         static_cast<int>(n), static_cast<int>(kv.k.dim(2)),
                                         static_cast<int>(kv.k.dim(3)), static_cast<int8_t*>(kv.k.data),
                                         static_cast<int8_t*>(kv.v.data), kv.k_scales, kv.v_scales, stream_,
                                         /*pdl=*/true));
    return;
  }
  EMBER_CUDA_CHECK(launch_kv_store2(k.as<float>(), v.as<float>(), static_cast<const int32_t*>(r.dev),
                                    static_cast<int>(n), row, kv.k.data, kv.v.data, kv.k.dtype,
                                    stream_, /*pdl=*/true));
}

bool CudaBackend::gemv_takes_rope(const KvLayer& kv, const float* k, const float* v, int64_t n,
                                  const int32_t* slots_dev) const {
  if (!gemv_rope_for(pg_.wtype) || !pr_.active || pg_.count != 3 || n != 1 || pg_.n != 1) return false;
  if (pg_.segs[0].out != pr_.x || pg_.segs[1].out != pr_.x2 || pr_.x2 != k || pg_.segs[2].out != v) return false;
  if (!slots_dev || !pr_.positions_in_step || pr_.inv_freq != pr_.host_inv_freq || !pr_.neox ||
      pr_.rotary_dim != pr_.head_dim)
    return false;
  if (!(kv.k.dtype == DType::BF16 || kv.k.dtype == DType::F16) || kv.k_scales || kv.v_scales) return false;
  const int64_t kv_row = kv.k.dim(2) * kv.k.dim(3);
  if (kv.k.dim(3) != pr_.head_dim || pg_.segs[1].m != kv_row || pg_.segs[2].m != kv_row ||
      pg_.segs[0].m != static_cast<int64_t>(pr_.n_heads) * pr_.head_dim)
    return false;
  if (pg_.wtype == DType::BF16) {
    const int64_t rows = pg_.segs[0].m + pg_.segs[1].m + pg_.segs[2].m;
    return gemv_rope_takes(pg_.segs, 3, pg_.n, pg_.k, gemv_variant(pg_.n, rows, pg_.k), pr_.head_dim);
  }
  QGemvSeg segs[3];
  for (int s = 0; s < 3; ++s)
    segs[s] = QGemvSeg{pg_.segs[s].w, pg_.segs[s].bias, pg_.segs[s].out, pg_.segs[s].m, pg_.accumulate[s]};
  return qgemv_rope_takes(qformat_of(pg_.wtype), segs, 3, pg_.n, pg_.k, pg_.input(), &pg_.norm, pr_.head_dim);
}

void CudaBackend::attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                            const AttentionParams& p, Tensor& out) {
  // The rope + K/V store kv_store held back for this attention (q and the cache its own), if
  // no op deferred since (flush would launch that one first, out of order).
  const bool others_pending = pgm_.active || pg_.count > 0 || pa_.active || pn_.active || pgl_.active || pr_.active;
  const bool held_rope = prs_active_ && !others_pending && prs_.q == q.data && prs_.k_cache == kv.k.data &&
                         prs_.v_cache == kv.v.data && prs_.head_dim == p.head_dim &&
                         prs_.n * p.n_heads * p.head_dim == q.numel();
  if (held_rope) prs_active_ = false;
  // The q/k/v GEMV before rotated q and stored this step's K/V (GemvRope), if no op came since.
  const bool gemv_roped = roped_.active && !others_pending && !held_rope && roped_.q == q.data &&
                          roped_.k_cache == kv.k.data && roped_.v_cache == kv.v.data;
  flush();
  require(q, DType::F32, "attention q");
  require(out, DType::F32, "attention out");
  const bool i8 = kv.k.dtype == DType::I8;
  EMBER_CHECK(kv.k.device == Device::CUDA && kv.k.dtype == kv.v.dtype && (i8 || (!kv.k_scales && !kv.v_scales)) &&
                  cuda_kv_dtype_supported(kv.k.dtype),
              "attention: cache must be CUDA tensors of one dtype of F32/F16/BF16/FP8 (no scales) or I8, not {}{}",
              dtype_name(kv.k.dtype), kv.k_scales ? " with scales" : "");
  // (in device memory, from alloc like the cache; not looked up per call: a pointer query
  // costs microseconds and a model has two per layer)
  EMBER_CHECK(!i8 || (kv.k_scales && kv.v_scales),
              "attention: an I8 K/V cache needs per-(slot, head) k_scales and v_scales (device memory)");
  EMBER_CHECK(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 && kv.k.dim(2) == p.n_kv_heads &&
                  kv.k.dim(3) == p.head_dim && kv.k.dim(1) == kv.block_size,
              "attention: params do not match cache {}", shape_string(kv.k));
  const int64_t n_tokens = q.numel() / (static_cast<int64_t>(p.n_heads) * p.head_dim);
  EMBER_CHECK(out.numel() == q.numel() && p.head_dim % 8 == 0 &&
                  reinterpret_cast<uintptr_t>(q.data) % 16 == 0,
              "attention: q {} out {} (rows must be 16-byte aligned)", shape_string(q), shape_string(out));
  const int n_seqs = batch.n_seqs;
  if (n_seqs == 0 || n_tokens == 0) {
    if (held_rope) EMBER_CUDA_CHECK(launch_rope_kv_store(prs_, stream_, /*pdl=*/true));
    return;
  }
  EMBER_CHECK(batch.query_start[n_seqs] == n_tokens, "attention: {} tokens, batch has {}", n_tokens,
              batch.query_start[n_seqs]);

  // Sequences with few query rows per K/V head take the decode kernel, the rest the prefill
  // kernel; one launch each.
  PagedAttnArgs a;
  a.q = q.as<float>();
  a.out = out.as<float>();
  a.k = kv.k.data;
  a.v = kv.v.data;
  a.kv_type = kv.k.dtype;
  a.k_scales = kv.k_scales;  // (I8 only)
  a.v_scales = kv.v_scales;
  a.max_blocks_per_seq = batch.max_blocks_per_seq;
  a.block_size = kv.block_size;
  a.n_heads = p.n_heads;
  a.n_kv_heads = p.n_kv_heads;
  a.head_dim = p.head_dim;
  a.scale = p.scale;
  a.softcap = p.logit_softcap;
  a.window = p.sliding_window;
  a.pdl = true;
  a.pdl_release_early = (pdl_early_ & 1) != 0;
  a.fill_gpu = attn_fill_;
  a.wgmma = wgmma_prefill_;
  a.decode_keys_as_m = keys_as_m_;
  a.prefill_mode = prefill_mode_;
  a.prefill_keys = prefill_keys_;
  const int group = p.n_heads / p.n_kv_heads;
  const bool mma = attention_mma_supported(a.kv_type, a.head_dim);
  EMBER_CHECK(mma || attention_simple_supported(a.kv_type, a.head_dim),
              "attention: no CUDA kernel for {} K/V with head_dim {}", dtype_name(a.kv_type), a.head_dim);
  std::vector<int32_t> ids[2];  // [0] decode, [1] prefill
  int max_new[2] = {0, 0}, max_kv[2] = {0, 0};
  for (int s = 0; s < n_seqs; ++s) {
    const int n_new = batch.query_start[s + 1] - batch.query_start[s];
    EMBER_CHECK(n_new >= 0 && n_new <= batch.seq_lens[s] &&
                    batch.seq_lens[s] <= batch.max_blocks_per_seq * kv.block_size,
                "attention: sequence {} has {} new tokens, length {}", s, n_new, batch.seq_lens[s]);
    if (n_new == 0) continue;
    const int c = n_new * group <= 16 ? 0 : 1;
    ids[c].push_back(s);
    max_new[c] = std::max(max_new[c], n_new);
    max_kv[c] = std::max(max_kv[c], batch.seq_lens[s]);
  }
  // A graph of decode steps plans its splits for the longest sequence it may see.
  if (kv_bound_ > 0) max_kv[0] = std::max(max_kv[0], kv_bound_);
  const size_t n = static_cast<size_t>(n_seqs);
  MetaRef qs{batch.query_start, sizeof(int32_t) * (n + 1)};
  MetaRef sl{batch.seq_lens, sizeof(int32_t) * n};
  MetaRef bt{batch.block_tables, sizeof(int32_t) * n * static_cast<size_t>(batch.max_blocks_per_seq)};
  MetaRef id_ref[2];
  const int32_t* id_dev[2] = {seq_ids(ids[0], id_ref[0]), seq_ids(ids[1], id_ref[1])};
  resolve({&qs, &sl, &bt, &id_ref[0], &id_ref[1]});
  a.query_start = static_cast<const int32_t*>(qs.dev);
  a.seq_lens = static_cast<const int32_t*>(sl.dev);
  a.block_tables = static_cast<const int32_t*>(bt.dev);
  // The launch arguments of group c (0 decode, 1 prefill).
  auto group_args = [&](int c) {
    PagedAttnArgs g = a;
    g.seq_ids = id_dev[c] ? id_dev[c] : static_cast<const int32_t*>(id_ref[c].dev);
    g.n_launch_seqs = static_cast<int>(ids[c].size());
    g.max_new = max_new[c];
    g.max_kv = max_kv[c];
    if (c == 0) g.splits = decode_splits_;
    return g;
  };
  // A keys-as-M decode launch of sequences 0 .. k - 1 with more blocks than the SMs take at once
  // starts them longest first: blocks start in grid order, and a long one started last leaves
  // the other SMs idle at the end (simulated: b252 x 1000-2000 keys 1.17x the ideal makespan in
  // batch order, 1.04x longest first; measured on an H200, session 18 call 6: fp8 3,968 vs 3,820
  // GB/s; the BF16 kernel, already at the copy rate there, read 4,200 vs 4,316, so it keeps
  // batch order).
  const size_t n_dec = ids[0].size();
  if (longest_first_ && id_dev[0] == iota_ && n_dec >= 2 && n_dec <= static_cast<size_t>(kMaxLongestFirst) &&
      static_cast<int64_t>(n_dec) * p.n_kv_heads > num_sms_ && attention_decode_keys_as_m(group_args(0)))
    id_dev[0] = longest_first_order(a.seq_lens, batch.seq_lens, static_cast<int>(n_dec));
  // The decode kernel does the rope and the store when it is the only launch and runs one
  // block per (sequence, kv head), in launches of at most kFewRopeBlocks blocks (measured at
  // batch 1 on an H200, one call, A/B twice: int4 380.3 / 381.6 vs 379.0 / 378.9 tok/s, fp8
  // 302.3 vs 301.3, bf16 level; large decode batches are not measured yet, so they keep the
  // separate launch); otherwise the rope and the store go first, on their own. The same launches
  // copy earlier tokens' K/V before their wait after a GEMV that did the rope (gemv_roped).
  constexpr int kFewRopeBlocks = 32;
  const bool few = static_cast<int64_t>(ids[0].size()) * p.n_kv_heads <= kFewRopeBlocks;
  // (The fused kernels read the sequence ids before their PDL wait, so those must be step
  // metadata or iota_, never the longest-first order a kernel of this step writes; launches
  // of so few blocks never take that order anyway.)
  const bool ids_are_metadata = id_dev[0] != order_;
  const bool decode_alone = few && ids_are_metadata && ids[1].empty() && !ids[0].empty() &&
                            (held_rope || gemv_roped) && attention_decode_takes_rope(group_args(0), num_sms_);
  if (held_rope) {
    if (decode_alone) {
      a.rope = DecodeRopeArgs{true, prs_.k, prs_.v, prs_.positions, prs_.inv_freq, prs_.slots, prs_.neox, prs_.factor};
    } else {
      EMBER_CUDA_CHECK(launch_rope_kv_store(prs_, stream_, /*pdl=*/true));
    }
  } else if (decode_alone) {
    a.early_tiles = true;
  }
  // At one token (a one-row o projection) the held o GEMV after it (BF16 weights, as the q/k/v
  // GEMV before it had), or the packed one of the q/k/v GEMV's format where its kernel takes a
  // gate, waits at the gate it opens (hold_gate.cuh): one arrival a block, a block per (sequence,
  // kv head) here.
  int gate_point = 0;
  if (last_gemv_wtype_ == DType::BF16) {
    gate_point = gemv_hold_ != 0 ? hold_gate_point_ : 0;
  } else if (is_packed_type(last_gemv_wtype_)) {
    const QFormat qf = qformat_of(last_gemv_wtype_);
    const int64_t o_k = static_cast<int64_t>(p.n_heads) * p.head_dim;  // (the o GEMV's k; as m it only picks a kind)
    const int point = qgemv_gate_point_ >= 0 ? qgemv_gate_point_ : qf == QFormat::Int8 ? 0 : 2;
    if (point != 0 && qgemv_gate_takes(qf, 1, o_k, o_k, /*norm=*/false)) gate_point = point;
  }
  // One token of one sequence after a GEMV that did the rope: held back for the o projection,
  // which may run it in its own kernel (attn_o_project); the next flush launches it otherwise.
  if (attn_o_ && fuse_ && decode_alone && a.early_tiles && n_tokens == 1 && ids[0].size() == 1 && p.head_dim == 128 &&
      (a.kv_type == DType::BF16 || a.kv_type == DType::F16) && p.n_kv_heads <= 8) {
    const PagedAttnArgs ac = group_args(0);
    if (!attn_o_known_declined(ac)) {
      pat_ = PendingAttention{true, ac, attention_pick(ac)};
      return;
    }
  }
  if (decode_alone && n_tokens == 1 && hold_gate_words_ && gate_point != 0 &&
      attention_decode_opens_gate(group_args(0), num_sms_)) {
    a.hold_gate = HoldGate{hold_gate_words_, gate_point};
    hold_gate_arrivals_ = static_cast<int>(ids[0].size()) * p.n_kv_heads;
  }
  for (int c = 0; c < 2; ++c) {
    if (ids[c].empty()) continue;
    const PagedAttnArgs ac = group_args(c);
    // The groups split where attention_pick does (16 packed rows), so it picks per group.
    launch_attention_group(ac, attention_pick(ac));
  }
}

void CudaBackend::glu(const Tensor& gate, const Tensor& up, bool gelu_tanh, Tensor& out) {
  require(gate, DType::F32, "glu gate");
  require(up, DType::F32, "glu up");
  require(out, DType::F32, "glu out");
  EMBER_CHECK(gate.numel() == up.numel() && out.numel() == gate.numel(), "glu: shapes differ");
  const GemvSeg& g = pg_.segs[0];
  const GemvSeg& u = pg_.segs[1];
  const bool pair = pg_.count == 2 && g.out == gate.data && u.out == up.data && g.m == u.m && !g.bias && !u.bias &&
                    !pg_.accumulate[0] && !pg_.accumulate[1] && gate.numel() == pg_.n * g.m && out.data != up.data;
  if (pair && pg_.wtype != DType::BF16) {
    // Packed gate and up GEMVs just before: one launch with the GLU in its epilogue.
    pg_.count = 0;
    EMBER_CUDA_CHECK(launch_qgemv_glu(qformat_of(pg_.wtype), g.w, u.w, pg_.input(), pg_.n, g.m, pg_.k, gelu_tanh,
                                      out.as<float>(), g.out, u.out, /*pdl=*/true, stream_, QGemvPath::Auto,
                                      &pg_.norm));
    return;
  }
  int variant = gemv_variant(pg_.n, g.m, pg_.k);
  if (!gemv_glu_variant(variant)) variant = gemv_pick_variant(pg_.n, g.m, pg_.k);
  if (pair && pg_.wtype == DType::BF16) {
    // The gate and up GEMVs just before: one launch with the GLU in its epilogue.
    pg_.count = 0;
    EMBER_CUDA_CHECK(launch_gemv_bf16_glu(g.w, u.w, pg_.x, pg_.n, g.m, pg_.k, gelu_tanh, out.as<float>(), g.out,
                                          u.out, variant, /*pdl=*/true, stream_));
    return;
  }
  const int64_t rows = gate.n_rows(), cols = gate.n_cols();
  const size_t half = static_cast<size_t>(rows * cols) * 2;  // bytes of one BF16 [rows, cols]
  if (pgm_.active && pgm_.jobs[0].out == gate.data && pgm_.jobs[1].out == up.data && pgm_.x.n_rows() == rows &&
      pgm_.jobs[0].w.n_rows() == cols && gate.n_dims == 2 && cols % 4 == 0 && cols <= 16 * 1024 && half % 16 == 0 &&
      !overlaps(out.data, out.nbytes(), up.data, up.nbytes()) && take_read_once(up.data, up.nbytes())) {
    // The held-back gate / up GEMMs write BF16 into up's buffer (nothing reads up after this
    // op), gate's rows in its first half; the GLU reads those.
    GemmJob jobs[2] = {pgm_.jobs[0], pgm_.jobs[1]};
    auto* bf = static_cast<uint8_t*>(up.data);
    jobs[0].out = bf;
    jobs[1].out = bf + half;
    pgm_.active = false;
    if (pgm_.run(*this, jobs, /*out_bf16=*/true)) {
      pgl_ = PendingGlu{true, bf, bf + half, DType::BF16, gelu_tanh, out.as<float>(), rows, cols};
      return;
    }
    pgm_.run(*this, pgm_.jobs, false);
  }
  flush();
  if (fuse_ && rows > kQGemvMaxBatch && gate.n_dims == 2) {
    // Waits for the next op: a GEMM of out (FP8 or BF16 weights) takes its x rows from this kernel.
    pgl_ = PendingGlu{true, gate.data, up.data, DType::F32, gelu_tanh, out.as<float>(), rows, cols};
    return;
  }
  EMBER_CUDA_CHECK(launch_glu(gate.as<float>(), up.as<float>(), gelu_tanh, out.as<float>(),
                              gate.numel(), stream_, /*pdl=*/true));
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  flush();
  require(a, DType::F32, "add a");
  require(b, DType::F32, "add b");
  require(out, DType::F32, "add out");
  EMBER_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "add: shapes differ");
  if (fuse_) {
    pa_ = PendingAdd{true, a.as<float>(), b.as<float>(), out.as<float>(), a.numel()};
    return;
  }
  EMBER_CUDA_CHECK(launch_add(a.as<float>(), b.as<float>(), out.as<float>(), a.numel(), stream_, /*pdl=*/true));
}

void CudaBackend::scale(Tensor& x, float s) {
  flush();
  require(x, DType::F32, "scale x");
  EMBER_CUDA_CHECK(launch_scale(x.as<float>(), s, x.numel(), stream_));
}

void CudaBackend::softcap(Tensor& x, float cap) {
  flush();
  require(x, DType::F32, "softcap x");
  EMBER_CHECK(cap > 0.0f, "softcap: cap {} must be positive", cap);
  EMBER_CUDA_CHECK(launch_softcap(x.as<float>(), cap, x.numel(), stream_));
}

Status CudaBackend::all_reduce_sum(const Tensor& in, Tensor& out) {
  if (!nccl_comm_) return Backend::all_reduce_sum(in, out);
  if (in.dtype != DType::F32 || out.dtype != DType::F32 || in.numel() != out.numel() ||
      in.device != Device::CUDA || out.device != Device::CUDA)
    return Status::errorf("all_reduce_sum: F32 device tensors of one size expected, got {} {} and {} {}",
                          dtype_name(in.dtype), shape_string(in), dtype_name(out.dtype), shape_string(out));
  flush();  // what the caller queued before (the partial sums) runs first
  // Small sums (decode steps) peer to peer: the choice depends on the size alone, so every
  // rank takes the same path.
  if (p2p_.n_ranks > 1 && in.numel() <= kP2pMaxElems) {
    EMBER_CUDA_TRY(launch_p2p_all_reduce(p2p_, in.as<float>(), out.as<float>(), in.numel(), stream_));
    return Status::ok();
  }
  return nccl_all_reduce_sum_f32(nccl_comm_, in.as<float>(), out.as<float>(), static_cast<size_t>(in.numel()),
                                 stream_);
}

}  // namespace ember::cuda

namespace ember {

Result<std::unique_ptr<Backend>> create_cuda_backend(int device) {
  return cuda::CudaBackend::create(device);
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  auto r = cuda::CudaBackend::create(device);
  if (!r.is_ok()) {
    EMBER_LOG_ERROR("cuda backend: {}", r.message());
    return nullptr;
  }
  return std::move(r).value();
}

CudaStep* cuda_step(Backend& backend) { return dynamic_cast<CudaStep*>(&backend); }

}  // namespace ember
