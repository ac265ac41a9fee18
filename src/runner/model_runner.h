#pragma once
// ModelRunner: a Model on a Backend behind the ModelExecutor interface. Owns the checkpoint
// (its memory maps), the backend, the model and the paged K/V storage.
#include "backend/backend.h"
#include "loader/weight_source.h"
#include "model/model.h"
#include "runner/model_executor.h"

#include <functional>
#include <memory>
#include <string>

namespace ember {

struct RunnerOptions {
  std::string device = "cpu";  // "cpu" or "cuda[:N]"
  int n_threads = 0;           // CPU threads, 0 = one per core
  // K/V element type; F32 default keeps fp32 fidelity, F16 halves the cache.
  DType kv_dtype = DType::F32;
  std::function<void(int done, int total)> progress;
};

// Parses "f32", "f16", "bf16", "int8"/"i8", "fp8"/"fp8_e4m3", "fp8_e5m2".
Result<DType> parse_kv_dtype(const std::string& name);

class ModelRunner : public ModelExecutor {
 public:
  static Result<std::unique_ptr<ModelRunner>> load(const std::string& model_path, const RunnerOptions& options);

  int vocab_size() const override { return model_->config().n_vocab; }
  int max_context() const override { return model_->config().max_context; }
  size_t kv_bytes_per_block(int block_size) const override;
  Status allocate_kv_cache(const KvCacheConfig& cfg) override;
  Status execute(const ForwardBatch& batch, std::vector<float>& logits) override;
  Status copy_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) override;

  const ModelConfig& config() const { return model_->config(); }
  const WeightSource& source() const { return *source_; }
  Backend& backend() { return *backend_; }

 private:
  ModelRunner() = default;
  std::unique_ptr<WeightSource> source_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  KvStorage kv_;
  DType kv_dtype_ = DType::F32;
};

}  // namespace ember
