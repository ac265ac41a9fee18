// CpuBackend: the Backend interface over the CPU kernels (ops live in their own files).
#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/context.h"
#include "backend/cpu/cpu_rank_group.h"
#include "core/log.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

namespace ember {

namespace {

class CpuBuffer final : public Buffer {
 public:
  explicit CpuBuffer(size_t bytes) : size_(bytes) {
    // Rounded up so aligned_alloc's size rule holds, and so SIMD tails may over-read.
    const size_t cap = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    data_ = std::aligned_alloc(64, cap);
    EMBER_CHECK(data_ != nullptr, "out of memory allocating {} bytes", bytes);
  }
  ~CpuBuffer() override { std::free(data_); }
  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(int n_threads, cpu::Isa isa, bool batch_invariant = false) : ctx_(n_threads, isa) {
    ctx_.batch_invariant = batch_invariant;
  }

  std::string name() const override {
    return fmt::format("cpu ({}, {} threads{})", cpu::isa_name(ctx_.kt.isa), ctx_.pool.size(),
                       ctx_.batch_invariant ? ", batch-invariant" : "");
  }
  Device device() const override { return Device::CPU; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override { return std::make_unique<CpuBuffer>(bytes); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}
  Result<Tensor> prepare_weight(const Tensor& host_weight) override {
    if (host_weight.device != Device::CPU)
      return Status::error("cpu backend: weight is not in host memory");
    return host_weight;
  }

  void get_rows(const Tensor& table, const int32_t* ids, int n, Tensor& out) override {
    cpu::cpu_get_rows(ctx_, table, ids, n, out);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override {
    cpu::cpu_rms_norm(ctx_, x, w, eps, out);
  }
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override {
    cpu::cpu_matmul(ctx_, x, w, bias, out);
  }
  void matmul_many(const Tensor& x, std::span<const MatmulTarget> targets) override {
    cpu::cpu_matmul_many(ctx_, x, targets);
  }
  void rope(Tensor& x, const int32_t* positions, const RopeParams& p) override {
    cpu::cpu_rope(ctx_, x, positions, p);
  }
  void kv_store(KvLayer& kv, const Tensor& k, const Tensor& v, const int32_t* slots) override {
    cpu::cpu_kv_store(ctx_, kv, k, v, slots);
  }
  void attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                 const AttentionParams& p, Tensor& out) override {
    cpu::cpu_attention(ctx_, q, kv, batch, p, out);
  }
  void glu(const Tensor& gate, const Tensor& up, bool gelu_tanh, Tensor& out) override {
    cpu::cpu_glu(ctx_, gate, up, gelu_tanh, out);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override { cpu::cpu_add(ctx_, a, b, out); }
  void scale(Tensor& x, float s) override { cpu::cpu_scale(ctx_, x, s); }
  void softcap(Tensor& x, float cap) override { cpu::cpu_softcap(ctx_, x, cap); }
  Status argmax_rows(const Tensor& logits, int32_t* ids) override { return cpu::cpu_argmax_rows(ctx_, logits, ids); }
  Status all_reduce_sum(const Tensor& in, Tensor& out) override {
    if (!group_) return Backend::all_reduce_sum(in, out);
    if (in.dtype != DType::F32 || out.dtype != DType::F32 || in.numel() != out.numel())
      return Status::errorf("all_reduce_sum: F32 tensors of one size expected, got {} {} and {} {}",
                            dtype_name(in.dtype), shape_string(in), dtype_name(out.dtype), shape_string(out));
    group_->all_reduce_sum(rank_, in.as<float>(), out.as<float>(), in.numel());
    return Status::ok();
  }

  void join_group(std::shared_ptr<cpu::CpuRankGroup> group, int rank) {
    group_ = std::move(group);
    rank_ = rank;
  }

 private:
  cpu::CpuContext ctx_;
  std::shared_ptr<cpu::CpuRankGroup> group_;
  int rank_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads, bool batch_invariant) {
  return std::make_unique<CpuBackend>(n_threads, cpu::detect_isa(), batch_invariant);
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads, bool batch_invariant,
                                          std::shared_ptr<cpu::CpuRankGroup> group, int rank) {
  auto be = std::make_unique<CpuBackend>(n_threads, cpu::detect_isa(), batch_invariant);
  be->join_group(std::move(group), rank);
  return be;
}

std::unique_ptr<Backend> make_cpu_backend_isa(int n_threads, std::string_view isa) {
  for (cpu::Isa i : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512, cpu::Isa::Avx512Vbmi}) {
    if (cpu::isa_name(i) == isa) {
      if (!cpu::isa_supported(i)) return nullptr;
      return std::make_unique<CpuBackend>(n_threads, i);
    }
  }
  return nullptr;
}

}  // namespace ember
