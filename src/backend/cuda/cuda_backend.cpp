// CudaBackend: host side of the CUDA backend. Checks shapes and dtypes, moves the per-step
// host metadata (ids, positions, slots, block tables) to the device in one copy per op, and
// launches the kernels of the *.cu files on the backend's stream.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/rows.cuh"
#include "core/log.h"
#include "quant/quant.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace ember {

namespace {

using cuda::AttnKernel;

constexpr size_t kLtWorkspaceBytes = 32u << 20;  // cuBLASLt's recommended size on Hopper
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

// Device scratch that grows on demand. All users run on one stream, so a region is free for
// the next op as soon as the previous op is queued; growing waits for the stream first.
class Scratch {
 public:
  ~Scratch() {
    if (p_) cudaFree(p_);
  }
  void* get(size_t bytes, cudaStream_t stream) {
    if (bytes <= n_) return p_;
    if (p_) {
      EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
      EMBER_CUDA_CHECK(cudaFree(p_));
      p_ = nullptr;
    }
    n_ = std::max<size_t>(bytes + bytes / 4, 1u << 16);
    EMBER_CUDA_CHECK(cudaMalloc(&p_, n_));
    return p_;
  }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// Packs several host arrays into one upload; offsets are 16-byte aligned.
class MetaPack {
 public:
  size_t add(const void* src, size_t bytes) {
    const size_t off = (bytes_.size() + 15) / 16 * 16;
    bytes_.resize(off + bytes);
    if (bytes) std::memcpy(bytes_.data() + off, src, bytes);
    return off;
  }
  const uint8_t* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }

 private:
  std::vector<uint8_t> bytes_;
};

bool is_device_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // plain host memory may report an error on old drivers
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

void require(const Tensor& t, DType dtype, const char* what) {
  EMBER_CHECK(t.valid() && t.device == Device::CUDA, "{} must be a CUDA tensor", what);
  EMBER_CHECK(t.dtype == dtype, "{} must be {}, got {}", what, dtype_name(dtype), dtype_name(t.dtype));
}

class CudaBackend final : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> create(int device) {
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
    EMBER_CUDA_TRY(cudaStreamCreateWithFlags(&be->stream_, cudaStreamNonBlocking));
    EMBER_ASSIGN_OR_RETURN(be->lt_, cuda::LtGemm::create());
    EMBER_CUDA_TRY(cudaMalloc(&be->lt_ws_, kLtWorkspaceBytes));
    EMBER_LOG_INFO("cuda backend: device {} ({}, {} SMs, {:.1f} GiB)", device, prop.name,
                   prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1u << 30));
    return std::unique_ptr<Backend>(std::move(be));
  }

  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_);
    for (void* p : weights_) cudaFree(p);
    if (lt_ws_) cudaFree(lt_ws_);
    lt_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + gpu_name_; }
  Device device() const override { return Device::CUDA; }

  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    void* p = nullptr;
    if (bytes > 0 && cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      EMBER_LOG_ERROR("cuda backend: cannot allocate {} bytes", bytes);
      return nullptr;
    }
    return std::make_unique<CudaBuffer>(p, bytes);
  }

  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void synchronize() override { EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  Result<Tensor> prepare_weight(const Tensor& host) override;
  void get_rows(const Tensor& table, const int32_t* ids, int n, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  void rope(Tensor& x, const int32_t* positions, const RopeParams& p) override;
  void kv_store(KvLayer& kv, const Tensor& k, const Tensor& v, const int32_t* slots) override;
  void attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                 const AttentionParams& p, Tensor& out) override;
  void glu(const Tensor& gate, const Tensor& up, bool gelu_tanh, Tensor& out) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(Tensor& x, float s) override;

 private:
  CudaBackend() = default;
  // Copies the packed arrays to device scratch (stream-ordered; the host copy may be
  // released on return, since pageable uploads are staged before cudaMemcpyAsync returns).
  uint8_t* upload_meta(const MetaPack& pack) {
    auto* d = static_cast<uint8_t*>(meta_.get(pack.size(), stream_));
    EMBER_CUDA_CHECK(cudaMemcpyAsync(d, pack.data(), pack.size(), cudaMemcpyHostToDevice, stream_));
    return d;
  }
  Status upload_converted(const Tensor& host, Tensor& dst);

  int device_ = 0;
  int num_sms_ = 0;
  std::string gpu_name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::LtGemm> lt_;
  void* lt_ws_ = nullptr;
  Scratch meta_, xconv_, attn_ws_, staging_;
  std::vector<void*> weights_;  // device copies made by prepare_weight
};

// Uploads host rows in chunks of at most kStagingBytes: plain types are copied as stored and
// converted on the GPU; quantized types are dequantized to F32 on the host first.
Status CudaBackend::upload_converted(const Tensor& host, Tensor& dst) {
  const int64_t rows = host.n_rows(), cols = host.n_cols();
  const bool plain = host.dtype == DType::F32 || host.dtype == DType::F16 || host.dtype == DType::BF16;
  const size_t src_row_bytes = plain ? host.row_bytes() : static_cast<size_t>(cols) * sizeof(float);
  const DType src_type = plain ? host.dtype : DType::F32;
  const int64_t chunk_rows = std::max<int64_t>(1, static_cast<int64_t>(kStagingBytes / std::max<size_t>(src_row_bytes, 1)));
  std::vector<float> deq;
  auto* dst_bytes = static_cast<uint8_t*>(dst.data);
  const size_t dst_row_bytes = dst.row_bytes();
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t nr = std::min(chunk_rows, rows - r0);
    const void* src = host.row_ptr(r0);
    if (!plain) {
      deq.resize(static_cast<size_t>(nr * cols));
      for (int64_t r = 0; r < nr; ++r)
        quant::dequantize_row(host.dtype, host.row_ptr(r0 + r), deq.data() + r * cols, cols);
      src = deq.data();
    }
    const size_t bytes = static_cast<size_t>(nr) * src_row_bytes;
    if (src_type == dst.dtype) {
      EMBER_CUDA_TRY(cudaMemcpyAsync(dst_bytes + r0 * dst_row_bytes, src, bytes, cudaMemcpyHostToDevice, stream_));
    } else {
      void* stage = staging_.get(bytes, stream_);
      EMBER_CUDA_TRY(cudaMemcpyAsync(stage, src, bytes, cudaMemcpyHostToDevice, stream_));
      EMBER_CUDA_TRY(cuda::launch_convert(src_type, stage, dst.dtype, dst_bytes + r0 * dst_row_bytes, nr * cols, stream_));
    }
    // The staging buffer and the host chunk are reused by the next iteration.
    EMBER_CUDA_TRY(cudaStreamSynchronize(stream_));
  }
  return Status::ok();
}

Result<Tensor> CudaBackend::prepare_weight(const Tensor& host) {
  if (host.device == Device::CUDA) return host;
  if (!quant::can_dequantize(host.dtype))
    return Status::errorf("cuda backend: cannot load weights of dtype {}", dtype_name(host.dtype));
  if (host.n_cols() % dtype_block_size(host.dtype) != 0)
    return Status::errorf("cuda backend: rows of {} elements are not whole {} blocks", host.n_cols(),
                          dtype_name(host.dtype));
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
  require(out, DType::F32, "get_rows out");
  const int64_t d = table.n_cols();
  EMBER_CHECK(out.n_cols() == d && out.n_rows() >= n, "get_rows: out {} for {} rows of {}",
              shape_string(out), n, d);
  for (int i = 0; i < n; ++i)
    EMBER_CHECK(ids[i] >= 0 && ids[i] < table.n_rows(), "get_rows: id {} out of range", ids[i]);
  if (n == 0) return;
  if (table.device == Device::CPU) {
    // Host table (e.g. a vocabulary kept off the GPU): gather and dequantize here.
    std::vector<float> rows(static_cast<size_t>(n * d));
    for (int i = 0; i < n; ++i)
      quant::dequantize_row(table.dtype, table.row_ptr(ids[i]), rows.data() + i * d, d);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(out.data, rows.data(), rows.size() * sizeof(float),
                                     cudaMemcpyHostToDevice, stream_));
    return;
  }
  MetaPack pack;
  const size_t off = pack.add(ids, sizeof(int32_t) * static_cast<size_t>(n));
  uint8_t* dm = upload_meta(pack);
  EMBER_CUDA_CHECK(cuda::launch_get_rows(table.data, table.dtype,
                                         reinterpret_cast<const int32_t*>(dm + off), n, d,
                                         out.as<float>(), stream_));
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  require(x, DType::F32, "rms_norm x");
  require(out, DType::F32, "rms_norm out");
  EMBER_CHECK(w.valid() && w.device == Device::CUDA, "rms_norm weight must be a CUDA tensor");
  const int64_t d = x.n_cols();
  EMBER_CHECK(w.numel() == d && out.numel() == x.numel(), "rms_norm: x {} w {} out {}",
              shape_string(x), shape_string(w), shape_string(out));
  EMBER_CUDA_CHECK(cuda::launch_rms_norm(x.as<float>(), w.data, w.dtype, eps, out.as<float>(),
                                         x.n_rows(), d, stream_));
}

void CudaBackend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  require(x, DType::F32, "matmul x");
  require(out, DType::F32, "matmul out");
  EMBER_CHECK(w.valid() && w.device == Device::CUDA, "matmul weight must be prepared for CUDA");
  const int64_t n = x.n_rows(), k = x.n_cols(), m = w.n_rows();
  EMBER_CHECK(w.n_cols() == k && out.n_rows() == n && out.n_cols() == m,
              "matmul: x {} w {} out {}", shape_string(x), shape_string(w), shape_string(out));
  const float* b = nullptr;
  if (bias && bias->valid()) {
    require(*bias, DType::F32, "matmul bias");
    EMBER_CHECK(bias->numel() == m, "matmul: bias {} for {} outputs", shape_string(*bias), m);
    b = bias->as<float>();
  }
  if (n == 0 || m == 0) return;
  if (k == 0) {
    EMBER_CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.nbytes(), stream_));
    if (b) EMBER_CUDA_CHECK(cuda::launch_add_bias(out.as<float>(), b, n, m, stream_));
    return;
  }
  if (w.dtype == DType::BF16 && n <= cuda::kGemvMaxBatch &&
      cuda::gemv_supported(static_cast<int>(n), k, x.data, w.data)) {
    EMBER_CUDA_CHECK(cuda::launch_gemv_bf16(w.data, x.as<float>(), b, out.as<float>(), static_cast<int>(n),
                                            m, k, cuda::gemv_pick_variant(static_cast<int>(n), k), /*pdl=*/true, stream_));
    return;
  }
  const void* xin = x.data;
  if (w.dtype == DType::BF16) {
    void* xb = xconv_.get(static_cast<size_t>(n * k) * 2, stream_);
    EMBER_CUDA_CHECK(cuda::launch_convert(DType::F32, x.data, DType::BF16, xb, n * k, stream_));
    xin = xb;
  } else {
    EMBER_CHECK(w.dtype == DType::F32, "matmul: CUDA weights must be BF16 or F32, got {}",
                dtype_name(w.dtype));
  }
  const Status st = lt_->matmul(w.dtype, xin, w.data, out.as<float>(), n, m, k, lt_ws_,
                                kLtWorkspaceBytes, stream_);
  EMBER_CHECK(st.is_ok(), "matmul: {}", st.message());
  if (b) EMBER_CUDA_CHECK(cuda::launch_add_bias(out.as<float>(), b, n, m, stream_));
}

void CudaBackend::rope(Tensor& x, const int32_t* positions, const RopeParams& p) {
  require(x, DType::F32, "rope x");
  EMBER_CHECK(x.n_dims == 3 && x.dim(2) == p.head_dim, "rope: x {} head_dim {}", shape_string(x),
              p.head_dim);
  EMBER_CHECK(p.rotary_dim > 0 && p.rotary_dim <= p.head_dim && p.rotary_dim % 2 == 0 && p.inv_freq,
              "rope: rotary_dim {} head_dim {}", p.rotary_dim, p.head_dim);
  const int64_t n = x.dim(0);
  if (n == 0) return;
  MetaPack pack;
  const size_t pos_off = pack.add(positions, sizeof(int32_t) * static_cast<size_t>(n));
  // inv_freq is backend memory when the model uploaded it, host memory otherwise.
  const bool freq_on_device = is_device_pointer(p.inv_freq);
  const size_t freq_off =
      freq_on_device ? 0 : pack.add(p.inv_freq, sizeof(float) * static_cast<size_t>(p.rotary_dim / 2));
  uint8_t* dm = upload_meta(pack);
  const float* freq = freq_on_device ? p.inv_freq : reinterpret_cast<const float*>(dm + freq_off);
  EMBER_CUDA_CHECK(cuda::launch_rope(x.as<float>(), reinterpret_cast<const int32_t*>(dm + pos_off),
                                     freq, n, static_cast<int>(x.dim(1)), p.head_dim, p.rotary_dim,
                                     p.neox, p.attention_factor, stream_));
}

void CudaBackend::kv_store(KvLayer& kv, const Tensor& k, const Tensor& v, const int32_t* slots) {
  require(k, DType::F32, "kv_store k");
  require(v, DType::F32, "kv_store v");
  EMBER_CHECK(kv.k.device == Device::CUDA && kv.v.device == Device::CUDA && kv.k.dtype == kv.v.dtype,
              "kv_store: cache must be CUDA tensors of one dtype");
  const int64_t n = k.dim(0);
  const int64_t row = kv.k.dim(2) * kv.k.dim(3);  // n_kv_heads * head_dim
  EMBER_CHECK(k.numel() == n * row && v.numel() == n * row, "kv_store: k {} v {} cache {}",
              shape_string(k), shape_string(v), shape_string(kv.k));
  const int64_t n_slots = kv.k.dim(0) * kv.k.dim(1);
  for (int64_t i = 0; i < n; ++i) EMBER_CHECK(slots[i] < n_slots, "kv_store: slot {} out of range", slots[i]);
  if (n == 0) return;
  MetaPack pack;
  const size_t off = pack.add(slots, sizeof(int32_t) * static_cast<size_t>(n));
  const auto* ds = reinterpret_cast<const int32_t*>(upload_meta(pack) + off);
  EMBER_CUDA_CHECK(cuda::launch_kv_store(k.as<float>(), ds, static_cast<int>(n), row, kv.k.data, kv.k.dtype, stream_));
  EMBER_CUDA_CHECK(cuda::launch_kv_store(v.as<float>(), ds, static_cast<int>(n), row, kv.v.data, kv.v.dtype, stream_));
}

void CudaBackend::attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                            const AttentionParams& p, Tensor& out) {
  require(q, DType::F32, "attention q");
  require(out, DType::F32, "attention out");
  EMBER_CHECK(kv.k.device == Device::CUDA && kv.k.dtype == kv.v.dtype && !kv.k_scales,
              "attention: cache must be CUDA tensors of one float dtype");
  EMBER_CHECK(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 && kv.k.dim(2) == p.n_kv_heads &&
                  kv.k.dim(3) == p.head_dim && kv.k.dim(1) == kv.block_size,
              "attention: params do not match cache {}", shape_string(kv.k));
  const int64_t n_tokens = q.numel() / (static_cast<int64_t>(p.n_heads) * p.head_dim);
  EMBER_CHECK(out.numel() == q.numel() && p.head_dim % 8 == 0 &&
                  reinterpret_cast<uintptr_t>(q.data) % 16 == 0,
              "attention: q {} out {} (rows must be 16-byte aligned)", shape_string(q), shape_string(out));
  const int n_seqs = batch.n_seqs;
  if (n_seqs == 0 || n_tokens == 0) return;
  EMBER_CHECK(batch.query_start[n_seqs] == n_tokens, "attention: {} tokens, batch has {}", n_tokens,
              batch.query_start[n_seqs]);

  // Sequences with few query rows per K/V head take the decode kernel, the rest the prefill
  // kernel; one launch each.
  cuda::PagedAttnArgs a;
  a.q = q.as<float>();
  a.out = out.as<float>();
  a.k = kv.k.data;
  a.v = kv.v.data;
  a.kv_type = kv.k.dtype;
  a.max_blocks_per_seq = batch.max_blocks_per_seq;
  a.block_size = kv.block_size;
  a.n_heads = p.n_heads;
  a.n_kv_heads = p.n_kv_heads;
  a.head_dim = p.head_dim;
  a.scale = p.scale;
  a.softcap = p.logit_softcap;
  a.window = p.sliding_window;
  const int group = p.n_heads / p.n_kv_heads;
  const bool mma = cuda::attention_mma_supported(a.kv_type, a.head_dim);
  EMBER_CHECK(mma || cuda::attention_simple_supported(a.kv_type, a.head_dim),
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
  MetaPack pack;
  const size_t qs_off = pack.add(batch.query_start, sizeof(int32_t) * static_cast<size_t>(n_seqs + 1));
  const size_t sl_off = pack.add(batch.seq_lens, sizeof(int32_t) * static_cast<size_t>(n_seqs));
  const size_t bt_off = pack.add(batch.block_tables, sizeof(int32_t) * static_cast<size_t>(n_seqs) *
                                                         static_cast<size_t>(batch.max_blocks_per_seq));
  const size_t id_off[2] = {pack.add(ids[0].data(), ids[0].size() * sizeof(int32_t)),
                            pack.add(ids[1].data(), ids[1].size() * sizeof(int32_t))};
  uint8_t* dm = upload_meta(pack);
  a.query_start = reinterpret_cast<const int32_t*>(dm + qs_off);
  a.seq_lens = reinterpret_cast<const int32_t*>(dm + sl_off);
  a.block_tables = reinterpret_cast<const int32_t*>(dm + bt_off);
  for (int c = 0; c < 2; ++c) {
    if (ids[c].empty()) continue;
    cuda::PagedAttnArgs ac = a;
    ac.seq_ids = reinterpret_cast<const int32_t*>(dm + id_off[c]);
    ac.n_launch_seqs = static_cast<int>(ids[c].size());
    ac.max_new = max_new[c];
    ac.max_kv = max_kv[c];
    const AttnKernel kind = !mma ? AttnKernel::Simple : (c == 0 ? AttnKernel::Decode : AttnKernel::Prefill);
    const size_t ws_bytes = cuda::attention_workspace_bytes(ac, kind, num_sms_);
    void* ws = ws_bytes ? attn_ws_.get(ws_bytes, stream_) : nullptr;
    EMBER_CUDA_CHECK(cuda::launch_paged_attention(ac, kind, ws, ws_bytes, num_sms_, stream_));
  }
}

void CudaBackend::glu(const Tensor& gate, const Tensor& up, bool gelu_tanh, Tensor& out) {
  require(gate, DType::F32, "glu gate");
  require(up, DType::F32, "glu up");
  require(out, DType::F32, "glu out");
  EMBER_CHECK(gate.numel() == up.numel() && out.numel() == gate.numel(), "glu: shapes differ");
  EMBER_CUDA_CHECK(cuda::launch_glu(gate.as<float>(), up.as<float>(), gelu_tanh, out.as<float>(),
                                    gate.numel(), stream_));
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  require(a, DType::F32, "add a");
  require(b, DType::F32, "add b");
  require(out, DType::F32, "add out");
  EMBER_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "add: shapes differ");
  EMBER_CUDA_CHECK(cuda::launch_add(a.as<float>(), b.as<float>(), out.as<float>(), a.numel(), stream_));
}

void CudaBackend::scale(Tensor& x, float s) {
  require(x, DType::F32, "scale x");
  EMBER_CUDA_CHECK(cuda::launch_scale(x.as<float>(), s, x.numel(), stream_));
}

}  // namespace

Result<std::unique_ptr<Backend>> create_cuda_backend(int device) { return CudaBackend::create(device); }

std::unique_ptr<Backend> make_cuda_backend(int device) {
  auto r = CudaBackend::create(device);
  if (!r.is_ok()) {
    EMBER_LOG_ERROR("cuda backend: {}", r.message());
    return nullptr;
  }
  return std::move(r).value();
}

}  // namespace ember
