#pragma once
// ModelRunner: a Model on a Backend behind the ModelExecutor interface. Owns the checkpoint
// (its memory maps), the backend, the model and the paged K/V storage.
//
// Tensor parallel (RunnerOptions::tensor_parallel > 1): this runner is rank 0 and owns a
// runner per other rank (the same checkpoint, its own backend, model shard and K/V storage)
// and their threads (RankThreads). Every step runs on all ranks at once; rank 0's logits,
// argmax or samples are the step's result.
//
// On a CUDA backend a step uploads its metadata once (CudaStep::set_step_metadata), runs the
// forward pass and downloads the logits: that download is the step's only host sync. Decode
// steps (one new token per sequence, every row's logits) run as CUDA graphs, one per (batch
// size, block-table width bucket; runner/decode_graph_shape.h): the first step of a shape
// runs eagerly (it sizes every buffer), the second captures the graph, later ones replay it.
// warm_up does both for batch sizes 1..N (short block tables) before the first request, and
// from then on a batch past 16 sequences runs in the graph of the next multiple of 8, with
// padding sequences whose rows are dropped.
#include "backend/backend.h"
#include "loader/weight_source.h"
#include "model/model.h"
#include "runner/model_executor.h"
#include "runner/rank_threads.h"

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace ember {

class CudaStep;
namespace cpu {
class CpuRankGroup;
}

struct RunnerOptions {
  std::string device = "cpu";  // "cpu" or "cuda[:N]"
  int n_threads = 0;           // CPU threads, 0 = one per core
  // K/V element type; F32 default keeps fp32 fidelity, F16 halves the cache.
  DType kv_dtype = DType::F32;
  // CUDA: capture decode steps in CUDA graphs (EMBER_CUDA_GRAPHS=0 also turns them off).
  bool cuda_graphs = true;
  // CPU: every row's result independent of the other rows in its batch (one matmul path for
  // any row count, attention splits that depend on the sequence only), so greedy outputs do
  // not depend on batching, chunking or preemption; costs prefill speed (docs/PERFORMANCE.md).
  bool batch_invariant = false;
  // CUDA: how matrices are stored on the GPU: "auto" (BF16), "bf16", "int4" (weight-only,
  // group 128, quantized at load), "fp8" (e4m3, per-row scales) or "int8" (per-row scales).
  // Other devices: "auto" only.
  std::string weight_format = "auto";
  // CPU: keep the weights memory-mapped instead of moving them into huge-page memory at
  // finish_load (the default there; other devices upload the weights: core/mmap_file.h).
  bool mmap = false;
  // Tensor parallel ranks (model/shard.h), in this process: on CUDA one GPU each (cuda:N
  // onwards, NCCL all-reduces), on the CPU threads split n_threads between them.
  int tensor_parallel = 1;
  std::function<void(int done, int total)> progress;
};

// Parses "f32", "f16", "bf16", "int8"/"i8", "fp8"/"fp8_e4m3", "fp8_e5m2".
Result<DType> parse_kv_dtype(const std::string& name);

class ModelRunner : public ModelExecutor {
 public:
  static Result<std::unique_ptr<ModelRunner>> load(const std::string& model_path, const RunnerOptions& options);
  ~ModelRunner() override;

  int vocab_size() const override { return model_->config().n_vocab; }
  int max_context() const override { return model_->config().max_context; }
  size_t kv_bytes_per_block(int block_size) const override;
  Status allocate_kv_cache(const KvCacheConfig& cfg) override;
  Status warm_up(const WarmUpOptions& options) override;
  Status execute(const ForwardBatch& batch, std::vector<float>& logits) override;
  // On the CPU, and on CUDA unless EMBER_GPU_SAMPLE=0.
  bool can_execute_argmax() const override { return device_argmax_; }
  Status execute_argmax(const ForwardBatch& batch, std::vector<int32_t>& token_ids) override;
  // CUDA on one rank with the device argmax: steps are queued on the stream, their ids
  // downloaded through two pinned slots, fed tokens taken from the last queued argmax.
  bool can_pipeline_argmax() const override { return cuda_ != nullptr && device_argmax_ && peers_.empty(); }
  Status enqueue_argmax(const ForwardBatch& batch, std::span<const int32_t> feed) override;
  Status collect_argmax(std::vector<int32_t>& token_ids) override;
  // A decode batch whose graph is captured (CUDA).
  bool queues_quickly(const ForwardBatch& batch) const override;
  bool can_execute_sample() const override { return device_sample_; }
  Status execute_sample(const ForwardBatch& batch, const std::vector<DeviceSampleSpec>& rows,
                        std::vector<DeviceSampled>& out) override;
  Status copy_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) override;

  // The checkpoint's config (under tensor parallelism each rank's model holds a share of the
  // heads: Model::config()).
  const ModelConfig& config() const { return model_->full_config(); }
  int tensor_parallel() const { return static_cast<int>(peers_.size()) + 1; }
  const WeightSource& source() const { return *source_; }
  // Once the caller has what it needs from source().metadata() (see WeightSource): frees the
  // metadata, hands the freed heap back to the OS (glibc keeps it otherwise) and, on the CPU
  // unless RunnerOptions::mmap, moves the weights into huge-page memory (progress in bytes).
  Status finish_load(const std::function<void(size_t, size_t)>& progress = {});
  Backend& backend() { return *backend_; }
  DType kv_dtype() const { return kv_dtype_; }

  // GPU runners: the KV cache bytes that fit in `utilization` of the device memory free now
  // (after the weights), less the activations of a step of max_tokens tokens and max_seqs
  // logit rows and a fixed reserve for workspaces and graphs. Error on other devices.
  Result<size_t> device_kv_budget(double utilization, int max_tokens, int max_seqs);
  // Decode graphs captured so far (0 off the GPU).
  size_t num_cuda_graphs() const;

 private:
  ModelRunner() = default;
  // This rank's backend and model (on the thread that will run the rank).
  Status init_rank(const RunnerOptions& options, const ShardSpec& shard,
                   const std::shared_ptr<cpu::CpuRankGroup>& cpu_group);
  // Runs own() here and the same step's forward pass on every peer rank, on their threads.
  // (Whatever may refuse a step is checked before: a rank that returned early would leave the
  // others waiting in a collective.)
  Status with_peers(const ForwardBatch& batch, const std::function<Status()>& own);
  // fn(rank's runner, rank) on every rank's thread.
  Status on_all_ranks(const std::function<Status(ModelRunner&, int)>& fn);
  Status execute_local(const ForwardBatch& batch, std::vector<float>& logits);
  Status execute_argmax_local(const ForwardBatch& batch, std::vector<int32_t>& token_ids);
  Status execute_sample_local(const ForwardBatch& batch, const std::vector<DeviceSampleSpec>& rows,
                              std::vector<DeviceSampled>& out);
  Result<size_t> device_kv_budget_local(double utilization, int max_tokens, int max_seqs);
  Status allocate_kv_local(const KvCacheConfig& cfg);
  Status copy_blocks_local(const std::vector<std::pair<int32_t, int32_t>>& src_dst);
  Status execute_cuda(const ForwardBatch& batch, std::vector<float>& logits);
  // Queues the forward pass of a CUDA step (graph replay for decode batches). profile_sync:
  // under EMBER_STEP_PROFILE, wait for the forward so that the profile splits it off.
  Result<Tensor> enqueue_cuda(const ForwardBatch& batch, bool profile_sync = true);
  // After the step metadata is set: queue feed_'s token replacement (nothing when empty).
  Status apply_feed(const ForwardBatch& batch);
  Result<Tensor> run_decode_graph(const ForwardBatch& batch);
  // The (batch size, block-table width) of the graph a decode batch runs in.
  std::pair<int, int> decode_graph_shape(const ForwardBatch& batch) const;
  void sync_activation_epoch();

  std::shared_ptr<WeightSource> source_;  // shared by the ranks
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  KvStorage kv_;
  bool make_resident_ = false;
  DType kv_dtype_ = DType::F32;

  // Greedy ids from the backend's argmax_rows (a CPU runner; CUDA has its own launch order).
  Status execute_argmax_host(const ForwardBatch& batch, std::vector<int32_t>& token_ids);

  // CUDA step state (null / unused on the CPU).
  CudaStep* cuda_ = nullptr;
  bool graphs_ = false;
  bool device_argmax_ = false;  // CPU, or CUDA unless EMBER_GPU_SAMPLE=0
  bool device_sample_ = false;  // device_argmax_ unless EMBER_GPU_SAMPLE_ROWS=0
  // enqueue_argmax: the feed of the step being queued (step metadata while it is queued),
  // the queued steps (download slot, ids), the next slot, the last queued step's logit rows.
  std::vector<int32_t> feed_;
  struct QueuedArgmax {
    int slot = 0;
    int64_t n = 0;
  };
  std::vector<QueuedArgmax> queued_;
  int next_slot_ = 0;
  int64_t last_queued_rows_ = -1;
  struct GraphState {
    bool warm = false;    // one eager step of this shape has run
    bool failed = false;  // capture failed: this shape stays eager
    bool captured = false;  // a graph of this shape was captured and launched
    Tensor logits;        // the graph's logit rows (fixed device address)
  };
  std::map<uint64_t, GraphState> graph_state_;
  uint64_t graph_epoch_ = 0;  // model activation epoch the graphs were captured at
  ForwardBatch padded_;       // decode batch padded to its graph's batch size and width
  bool graph_pad_ = true;     // EMBER_CUDA_GRAPH_PAD=0: a graph for every batch size
  int graph_pad_cap_ = 0;     // largest padded batch (warm_up's limits; 0 before it: no padding)

  // Tensor parallel: ranks 1..n-1 (peers_[r - 1]) and the threads that run them.
  std::vector<std::unique_ptr<ModelRunner>> peers_;
  std::unique_ptr<RankThreads> rank_threads_;
  std::vector<float> peer_logits_;  // a peer's (empty) logits
};

}  // namespace ember
