#include "runner/model_runner.h"

#include "backend/cpu/cpu_backend.h"
#ifdef EMBER_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#include <cstring>

namespace ember {

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
Result<std::unique_ptr<Backend>> make_backend(const RunnerOptions& o) {
  if (o.device == "cpu") return make_cpu_backend(o.n_threads);
  if (o.device.rfind("cuda", 0) == 0) {
#ifdef EMBER_HAVE_CUDA
    const int index = o.device.size() > 5 ? std::atoi(o.device.c_str() + 5) : 0;
    return make_cuda_backend(index);
#else
    return Status::error("this ember was built without CUDA (configure with -DEMBER_CUDA=ON)");
#endif
  }
  return Status::errorf("unknown device '{}' (cpu, cuda, cuda:N)", o.device);
}
}  // namespace

Result<std::unique_ptr<ModelRunner>> ModelRunner::load(const std::string& path, const RunnerOptions& o) {
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  EMBER_ASSIGN_OR_RETURN(r->source_, WeightSource::open(path));
  EMBER_ASSIGN_OR_RETURN(r->backend_, make_backend(o));
  ModelLoadOptions lo;
  lo.progress = o.progress;
  EMBER_ASSIGN_OR_RETURN(r->model_, Model::load(*r->source_, *r->backend_, lo));
  r->kv_dtype_ = o.kv_dtype;
  return r;
}

size_t ModelRunner::kv_bytes_per_block(int block_size) const {
  return model_->kv_bytes_per_block(block_size, kv_dtype_);
}

Status ModelRunner::allocate_kv_cache(const KvCacheConfig& cfg) {
  EMBER_ASSIGN_OR_RETURN(kv_, model_->allocate_kv(cfg.n_blocks, cfg.block_size, kv_dtype_));
  return Status::ok();
}

Status ModelRunner::execute(const ForwardBatch& batch, std::vector<float>& logits) {
  if (kv_.layers.empty()) return Status::error("execute before allocate_kv_cache");
  return model_->forward(batch, kv_, logits);
}

Status ModelRunner::copy_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
  // A block of one layer is contiguous in each of K, V (and their scales): copy those.
  for (auto& layer : kv_.layers) {
    for (Tensor* t : {&layer.k, &layer.v}) {
      const size_t block_bytes = t->nbytes() / static_cast<size_t>(kv_.n_blocks);
      auto* base = static_cast<uint8_t*>(t->data);
      for (auto [src, dst] : src_dst) {
        if (src < 0 || dst < 0 || src >= kv_.n_blocks || dst >= kv_.n_blocks)
          return Status::errorf("copy_blocks: block pair ({}, {}) out of range", src, dst);
        if (backend_->device() == Device::CPU) {
          std::memcpy(base + block_bytes * static_cast<size_t>(dst), base + block_bytes * static_cast<size_t>(src), block_bytes);
        } else {
          std::vector<uint8_t> tmp(block_bytes);
          backend_->download(tmp.data(), base + block_bytes * static_cast<size_t>(src), block_bytes);
          backend_->upload(base + block_bytes * static_cast<size_t>(dst), tmp.data(), block_bytes);
        }
      }
    }
    for (float* s : {layer.k_scales, layer.v_scales}) {
      if (s == nullptr) continue;
      const size_t per_block = static_cast<size_t>(kv_.block_size) * model_->config().n_kv_heads;
      for (auto [src, dst] : src_dst)
        std::memcpy(s + per_block * static_cast<size_t>(dst), s + per_block * static_cast<size_t>(src), per_block * sizeof(float));
    }
  }
  return Status::ok();
}

}  // namespace ember
