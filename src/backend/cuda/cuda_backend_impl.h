#pragma once
// CudaBackend, the class behind make_cuda_backend (internal to src/backend/cuda). Its code is
// split in two files: cuda_backend.cpp (creation, memory, weights and the ops) and
// cuda_backend_step.cpp (step metadata, CUDA graphs, deferred launches that fuse ops).
//
// Fusion by deferral: matmul, add and rope are not launched at once when the next op may
// join them; any other call (and download / synchronize / capture end) launches what is
// pending first, so the stream order every op observes is the one the caller asked for.
//   - GEMV matmuls (BF16 weights, <= 4 rows) that read the same x: one multi-matrix launch
//     (q/k/v; gate/up), and gate/up followed by glu(gate, up): one GEMV with the GLU epilogue;
//   - add(a, b, out) followed by rms_norm(out, ...): one residual-add + norm kernel;
//   - rope(q) followed by rope(k) with the same positions and parameters, and then
//     kv_store(k, v): one launch that rotates q and k and writes the cache; where q, k, v come
//     from a packed q/k/v GEMV of one row, that GEMV's epilogue does it (GemvRope), and the
//     decode attention after it copies earlier tokens' K/V before its PDL wait;
//   - (add +) rms_norm or glu of more rows than the GEMV takes, followed by GEMMs of their
//     output (FP8 or BF16 weights): the norm / GLU kernel also writes the e4m3 or BF16 rows the
//     GEMMs read, and only those when the output was hinted read-once (hint_read_once): no F32
//     rows nobody reads;
//   - matmul_many of two FP8 or BF16 matrices (gate / up) followed by glu of their outputs, the
//     up output hinted read-once: the GEMMs write BF16 into up's buffer (gate's half, up's
//     half) and the GLU reads those, half the bytes of F32 both ways;
//   - a plain rms_norm of GEMV rows followed by GEMVs of its output with packed weights: the
//     staged GEMV computes the norm while staging x (xnorm.h). matmul_accumulate at those sizes
//     adds into the residual in the GEMV's epilogue, so the norm after the out / down
//     projections is such a plain norm: a decode layer's two norms take no launch of their own.
//     (BF16 GEMVs do neither: their many short blocks would each repeat the norm, measured
//     8-12% slower at batch 1.)
// EMBER_CUDA_FUSE=0 turns the deferral off (every op launches as called), EMBER_CUDA_LEAN_GLU=0
// the read-once hints (and with them the BF16 gate / up outputs), EMBER_CUDA_FOLD_NORM=0 the
// GEMVs' residual accumulation and norm folding (see below). EMBER_CUDA_FP8_OUTER=0
// applies the FP8 GEMM's row / channel scales in a kernel after it instead of inside it.
// EMBER_CUDA_ATTN_FILL=0 keeps decode attention's key-range splits at >= 4 tiles even when the
// launch leaves SMs idle (PagedAttnArgs::fill_gpu). EMBER_CUDA_GEMV_VARIANT and
// EMBER_CUDA_DECODE_SPLITS force a GEMV tiling / a decode split count (tuning experiments).
// EMBER_CUDA_QGEMV_NORM_ONE=0 keeps the packed GEMV's block-wide norm sums at one batch row
// (qgemv_staged.cu, XStage); EMBER_CUDA_QGEMV_R4=0 its 8-unit ring for one-row int4 GEMVs at
// k <= 4096 (2: only those with the norm folded, 3: only those without);
// EMBER_CUDA_QGEMV_R4B=0 the 8-unit ring for fp8 / int8 q/k/v at one row (1, 3, 4: the 4-unit
// ring for more of their one-row GEMVs). EMBER_CUDA_GEMV_ROPE=0 keeps the rope + K/V store out
// of the q/k/v GEMV (its own launch, or the attention's prologue), =1 puts it into every
// format's (by default the packed GEMVs', and BF16's where the o projection is not held).
// EMBER_CUDA_P2P_ALLREDUCE=0 sends a tensor-parallel group's small sums through NCCL too instead
// of the peer-to-peer kernel (nccl_group.cpp, p2p_allreduce.cuh).
#include "backend/cuda/attention.cuh"
#include "backend/cuda/attn_o.cuh"
#include "backend/cuda/attn_o_split.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/gemm_lt.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/p2p_allreduce.cuh"
#include "backend/cuda/qgemv.cuh"
#include "backend/cuda/rows.cuh"

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace ember::cuda {

// Whether byte ranges [a, a + an) and [b, b + bn) share a byte.
inline bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bn && pb < pa + an;
}

class CudaBackend final : public Backend, public CudaStep {
 public:
  static Result<std::unique_ptr<Backend>> create(int device);
  ~CudaBackend() override;

  // Backend
  std::string name() const override { return "cuda:" + gpu_name_; }
  Device device() const override { return Device::CUDA; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  Result<Tensor> prepare_weight(const Tensor& host) override;
  void get_rows(const Tensor& table, const int32_t* ids, int n, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  void matmul_many(const Tensor& x, std::span<const MatmulTarget> targets) override;
  bool matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& acc) override;
  void hint_read_once(const Tensor& t) override;
  void rope(Tensor& x, const int32_t* positions, const RopeParams& p) override;
  void kv_store(KvLayer& kv, const Tensor& k, const Tensor& v, const int32_t* slots) override;
  void attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                 const AttentionParams& p, Tensor& out) override;
  void glu(const Tensor& gate, const Tensor& up, bool gelu_tanh, Tensor& out) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(Tensor& x, float s) override;
  void softcap(Tensor& x, float cap) override;
  Status all_reduce_sum(const Tensor& in, Tensor& out) override;

  // Tensor parallel (join_cuda_tensor_parallel): the rank's NCCL communicator (ncclComm_t),
  // and the peer-to-peer all-reduce of small sums (p2p_allreduce.cuh; its buffers, in this
  // GPU's memory, are the backend's to free).
  int device_index() const { return device_; }
  void set_nccl_comm(void* comm) { nccl_comm_ = comm; }
  void set_p2p(const P2pRank& p, std::vector<void*> buffers) {
    p2p_ = p;
    p2p_buffers_ = std::move(buffers);
  }

  // CudaStep
  void set_step_metadata(const std::vector<HostArray>& arrays) override;
  void clear_step_metadata() override {
    step_arrays_.clear();
    ++meta_epoch_;
  }
  void set_decode_kv_bound(int max_kv) override { kv_bound_ = max_kv; }
  Status begin_capture() override;
  Status end_capture(uint64_t key) override;
  bool launch_graph(uint64_t key) override;
  void drop_graphs() override;
  size_t num_graphs() const override { return graphs_.size(); }
  uint64_t gemv_rope_launches() const override { return gemv_rope_launches_; }
  uint64_t next_l2_launches() const override { return next_l2_launches_; }
  uint64_t hold_gate_launches() const override { return hold_gate_launches_; }
  uint64_t attn_o_launches() const override { return attn_o_launches_; }
  uint64_t hold_gate_timeouts() override;
  Result<GpuMemoryInfo> memory_info() override;
  void make_current() override { cudaSetDevice(device_); }
  Status set_weight_format(const std::string& name) override;
  Status argmax_rows(const Tensor& logits, int32_t* host_out) override;
  Status argmax_rows_async(const Tensor& logits, int slot) override;
  Status argmax_rows_wait(int slot, int32_t* host_out, int64_t n) override;
  Status feed_tokens(const int32_t* token_ids, const int32_t* feed, int n) override;
  Status sample_rows(const Tensor& logits, const std::vector<DeviceSampleRow>& rows,
                     const std::vector<DeviceSampleAdj>& adj, std::vector<DeviceSampleOut>& out,
                     std::vector<DeviceSampleTop>& top) override;

 private:
  CudaBackend() = default;

  // Device scratch that grows on demand (all users run on one stream, so a region is free
  // for the next op as soon as the previous op is queued). Growing outside a capture waits
  // for the stream and drops every graph; inside a capture the old buffer is kept alive
  // (the graph may use it) until graphs are dropped. Either way epoch_ moves on, which
  // invalidates graphs captured before.
  struct Scratch {
    void* p = nullptr;
    size_t n = 0;
  };
  void* scratch(Scratch& s, size_t bytes);

  // A host array an op needs on the device: a step-metadata copy, else a per-op upload.
  struct MetaRef {
    const void* host = nullptr;
    size_t bytes = 0;
    const void* dev = nullptr;
  };
  void resolve(std::initializer_list<MetaRef*> refs);
  const void* lookup(const void* host, size_t bytes) const;
  const int32_t* seq_ids(const std::vector<int32_t>& ids, MetaRef& ref);
  // Sequences 0 .. n - 1 longest first (launch_longest_first) on the device, from dev_lens (the
  // device copy of host_lens); computed once a step while host_lens is in the step metadata.
  const int32_t* longest_first_order(const int32_t* dev_lens, const int32_t* host_lens, int n);
  bool on_device(const void* p);

  // Deferred launches (see the file comment).
  void flush();
  // The o projection x @ w^T into acc with the held batch-1 decode attention (pat_) whose output
  // x is, as one kernel (attn_o.cuh); false (nothing launched) where that kernel does not apply.
  bool attn_o_project(const Tensor& x, const Tensor& w, Tensor& acc);
  // Whether attn_o_project already found, for the o projection it saw last, that this attention's
  // shape does not run in one wave (then holding it only costs the gate).
  bool attn_o_known_declined(const PagedAttnArgs& g) const;
  // Whether attn_o_project launches EMBER_CUDA_ATTN_O=1's kernel on a (its clusters in one wave:
  // asked once a shape, cached) ...
  bool attn_o_one_wave_ready(const AttnOArgs& a);
  // ... or =2's (attn_o_split.cuh: the keys split over a cluster a K/V head, the heads' products
  // summed by the last block of each rows chunk), whose product scratch this sizes into a.part.
  bool attn_o_split_ready(AttnOSplitArgs& a);
  // One attention launch (its workspace from attn_ws_).
  void launch_attention_group(const PagedAttnArgs& a, AttnKernel kind);
  // accumulate: out += the product (matmul_accumulate).
  bool try_defer_gemv(const Tensor& x, const Tensor& w, const float* bias, Tensor& out, bool accumulate = false);
  struct PendingGemv {
    int count = 0;
    DType wtype = DType::BF16;  // BF16, or a packed format (Q4_0 = int4, FP8_E4M3, Q8_0 = int8)
    const float* x = nullptr;   // the x the matmuls were given
    int n = 0;
    int64_t k = 0;
    GemvSeg segs[kGemvMaxSegs];
    bool accumulate[kGemvMaxSegs] = {};  // segs[s].out += the product (packed weights only)
    // x's pending RMSNorm, folded into the packed GEMV's x staging: the kernel reads x_raw,
    // the norm's input, and writes x (norm.out) itself. norm.w null: none.
    XNorm norm;
    const float* x_raw = nullptr;
    const float* input() const { return norm.w ? x_raw : x; }
    // The rope + K/V store of q, k, v (segments 0..2) in the GEMV's epilogue (kv_store sets it
    // where gemv_takes_rope: qgemv_rope_takes / gemv_rope_takes; head_dim 0: none).
    GemvRope rope;
  };
  // Whether the GEMV of pg_ (about to start on x [n, k] with weights of wtype) can fold the
  // pending norm pn_ in.
  bool gemv_takes_pending_norm(const Tensor& x, DType wtype, const void* out, size_t out_bytes) const;
  struct PendingAdd {
    bool active = false;
    const float* a = nullptr;
    const float* b = nullptr;
    float* out = nullptr;
    int64_t n = 0;
  };
  struct PendingRope {
    bool active = false;
    float* x = nullptr;
    int n_heads = 0;
    float* x2 = nullptr;  // k, once rope(k) joined rope(q)
    int n_heads2 = 0;
    int64_t n = 0;
    const int32_t* host_positions = nullptr;
    const int32_t* positions = nullptr;  // device
    bool positions_in_step = false;      // a step-metadata copy (not in the per-op scratch)
    const float* inv_freq = nullptr;     // device
    const float* host_inv_freq = nullptr;
    int head_dim = 0, rotary_dim = 0;
    bool neox = true;
    float factor = 1.0f;
  };

  // rms_norm (b null) or add + rms_norm (sum = x + b) of more rows than the GEMV takes, and
  // glu of such rows: launched by the next op, which may be an FP8 GEMM of their output that
  // quantizes it in the same kernel (fp8_rows_of).
  struct PendingNorm {
    bool active = false;
    const float* x = nullptr;
    const float* b = nullptr;
    float* sum = nullptr;
    const void* w = nullptr;
    DType w_type = DType::F32;
    float eps = 0.0f;
    float* out = nullptr;
    int64_t rows = 0, d = 0;
    // The norm as a GEMV folds it in (plain norms only: b null).
    XNorm xnorm() const { return XNorm{w, w_type == DType::BF16, eps, out}; }
  };
  struct PendingGlu {
    bool active = false;
    const void* gate = nullptr;
    const void* up = nullptr;
    DType in_type = DType::F32;  // of gate and up: F32, or BF16 from the gate / up GEMMs
    bool gelu_tanh = false;
    float* out = nullptr;
    int64_t rows = 0, cols = 0;
  };
  void launch_norm(const PendingNorm& pn);
  // Read-once hints (hint_read_once) since the last flush: byte ranges of device tensors.
  static constexpr int kMaxReadOnce = 4;
  struct ByteRange {
    const void* p = nullptr;
    size_t bytes = 0;
  };
  ByteRange read_once_[kMaxReadOnce];
  int n_read_once_ = 0;
  // Whether [p, p + bytes) was hinted read-once (the hint is used up).
  bool take_read_once(const void* p, size_t bytes);

  Status upload_converted(const Tensor& host, Tensor& dst);
  Status upload_packed(const Tensor& host, QFormat f, void* dst);
  // Packed int4 / fp8 / int8 weights, labelled Q4_0 / FP8_E4M3 / Q8_0 on the device (the qgemv.cuh
  // layout, not GGML blocks: GGUF Q4_0 / Q8_0 tensors are dequantized on the host at load, so a
  // CUDA tensor of these dtypes is always packed, and only the ops here read it).
  static bool is_packed_type(DType t) { return t == DType::Q4_0 || t == DType::FP8_E4M3 || t == DType::Q8_0; }
  static bool is_packed(const Tensor& w) { return w.device == Device::CUDA && is_packed_type(w.dtype); }
  static QFormat qformat_of(DType t) {
    return t == DType::Q4_0 ? QFormat::Int4 : t == DType::Q8_0 ? QFormat::Int8 : QFormat::Fp8;
  }
  void matmul_packed_large(const Tensor& x, const Tensor& w, const float* bias, Tensor& out);
  bool gemm_over_direct_gemv(const Tensor& x, const Tensor& w) const;
  bool packed_gemm_many(const Tensor& x, std::span<const MatmulTarget> targets);
  bool packed_gemm_takes(const Tensor& x, const Tensor& w) const;
  void* packed_gemm_x(QFormat f, const Tensor& x);
  void packed_gemm(const Tensor& x, const Tensor& w, const float* bias, float* out, bool accumulate,
                   bool stage_x = true);
  // The checks of matmul's arguments; returns the bias data (null: none).
  const float* check_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out);
  // The GEMM x rows of x (xq_ / xconv_ scratch): written by the pending RMSNorm or GLU that
  // produces x in the same kernel (only those rows when x was hinted read-once: *only_rows),
  // else converted from x after what is pending. False: no pending producer took them.
  bool rows_from_producer(const Tensor& x, const GemmRowsOut& ro, bool* only_rows);
  // x quantized to e4m3 rows for the FP8 GEMM: q [n, k_pad], scale [n] (device, xq_ scratch).
  // x_written false: x itself was never written (its producer was hinted read-once and wrote
  // only these rows), so no fallback may read x.
  struct Fp8Rows {
    const uint8_t* q;
    const float* scale;
    int64_t n, k_pad;
    bool x_written = true;
  };
  // GEMMs of one x (matmul_many): out F32 [n, m], or BF16 (run_gemms with out_bf16).
  struct GemmJob {
    Tensor w;
    const float* bias = nullptr;
    void* out = nullptr;
  };
  static constexpr int kMaxGemmJobs = 4;
  // The jobs on e4m3 rows xq (FP8 weights) or BF16 rows xb, side by side at decode batch
  // sizes (x: the F32 rows, for the dequantizing fallback). out_bf16: false, nothing
  // launched, when cuBLASLt has no BF16-output FP8 GEMM (the caller runs them as F32).
  bool run_gemms(const Tensor& x, const Fp8Rows* xq, const void* xb, const GemmJob* jobs, int count,
                 bool out_bf16 = false);
  // matmul_many's gate / up GEMMs (FP8: on xq; BF16: on xb) held back until the next op: a
  // glu of their outputs takes them as BF16 (see the file comment), anything else launches
  // them as F32.
  struct PendingGemms {
    bool active = false;
    Tensor x;
    Fp8Rows xq{};             // FP8 weights (xb null)
    const void* xb = nullptr;  // BF16 weights
    GemmJob jobs[2];
    bool run(CudaBackend& be, const GemmJob* jobs, bool out_bf16) const {
      return be.run_gemms(x, xb ? nullptr : &xq, xb, jobs, 2, out_bf16);
    }
  };
  PendingGemms pgm_;
  bool bf16_gemm_out_ok_ = true;  // cuBLASLt took the BF16-output GEMM
  bool lean_glu_ = true;          // EMBER_CUDA_LEAN_GLU=0: ignore read-once hints (A/B runs)
  bool packed_gemm_ = true;         // EMBER_CUDA_QGEMM=0: int4 / int8 past the GEMV dequantized to BF16 (A/B runs)
  bool packed_wg_ = true;           // EMBER_CUDA_QGEMM_WG=0: past 64 rows dequantized to BF16 (A/B runs)
  // Rows of x up to which the wgmma GEMM takes int4 / int8 (0: the defaults in
  // packed_gemm_takes; EMBER_CUDA_QGEMM_WG_MAX_ROWS sets both).
  int packed_wg_max_rows_ = 0;
  bool stage_x_once_ = true;        // EMBER_CUDA_QGEMM_STAGE_ONCE=0: each packed GEMM of one x stages it (A/B runs)
  // EMBER_CUDA_FOLD_NORM=0: packed GEMVs neither add into a residual nor fold the norm after
  // it in (A/B runs).
  bool fold_norm_ = true;
  bool fp8_large(const Tensor& x, const Tensor& w) const;
  static const float* fp8_channel_scales(const Tensor& w);
  Fp8Rows fp8_rows_of(const Tensor& x);
  const void* bf16_rows_of(const Tensor& x);
  // stream / workspace: the backend's own by default, a side stream's for concurrent GEMMs.
  bool fp8_gemm(const Fp8Rows& xq, const Tensor& w, const float* bias, Tensor& out, cudaStream_t stream = nullptr,
                void* workspace = nullptr);

  int device_ = 0;
  void* nccl_comm_ = nullptr;  // ncclComm_t of a tensor-parallel rank (nccl_group.cpp), else null
  P2pRank p2p_;                // n_ranks 0: no peer-to-peer all-reduce
  std::vector<void*> p2p_buffers_;
  int num_sms_ = 0;
  std::string gpu_name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<LtGemm> lt_;
  void* lt_ws_ = nullptr;
  // matmul_many's GEMMs of one x past the first run on side streams, each with its own
  // cuBLASLt workspace, forked from and joined back into stream_ with events (graph capture
  // turns them into parallel branches). A 1024-row k/v projection at 252 rows fills 16 of 132
  // SMs, so q, k and v side by side take the time of q alone.
  static constexpr int kSideStreams = 2;
  cudaStream_t side_[kSideStreams] = {};
  void* side_ws_[kSideStreams] = {};
  cudaEvent_t fork_event_ = nullptr;
  cudaEvent_t join_event_[kSideStreams] = {};
  bool concurrent_gemms_ = true;  // EMBER_CUDA_CONCURRENT_GEMMS=0: one after another
  bool accumulate_gemms_ = true;  // EMBER_CUDA_ACCUMULATE=0: matmul_accumulate declines
  // A long-k FP8 GEMM with too few tiles to fill the GPU (the down projection at decode batch
  // sizes: 64 CTAs) as two GEMMs over the halves of k side by side, the second into split_
  // and added by a pending add (out = out + split_, fused into a following RMSNorm of out).
  // accumulate: out += the product. False when the shape does not qualify (nothing launched).
  bool fp8_gemm_split_k(const Fp8Rows& xq, const Tensor& w, const float* bias, Tensor& out, bool accumulate = false);
  Scratch split_;
  Scratch meta_, xconv_, attn_ws_, staging_, step_dev_, qdeq_, xq_, qgemm_x_;
  int weight_format_ = -1;  // -1 BF16, else a QFormat
  bool fp8_lt_ok_ = true;   // cuBLASLt took the FP8 GEMM (else dequantized BF16 GEMMs)
  bool fp8_outer_ok_ = true;  // ... with the scales inside it (EMBER_CUDA_FP8_OUTER=0: never)
  std::vector<void*> weights_;  // device copies made by prepare_weight
  int32_t* iota_ = nullptr;     // [kIotaSize] 0, 1, 2, ... (sequence-id lists of whole batches)
  // Whole-batch decode launches of more blocks than the SMs: sequences longest first
  // (EMBER_CUDA_LONGEST_FIRST=0: in batch order). order_ [kMaxLongestFirst], valid for
  // (order_lens_, order_n_) at order_epoch_; meta_epoch_ moves with every step's metadata and
  // every capture's start and end (a failed capture's launches never ran).
  bool longest_first_ = true;
  int32_t* order_ = nullptr;
  const int32_t* order_lens_ = nullptr;
  int order_n_ = 0;
  uint64_t meta_epoch_ = 1, order_epoch_ = 0;
  static constexpr int kIotaSize = 1 << 16;
  std::unordered_map<const void*, bool> device_ptr_cache_;

  // Step metadata: pinned staging, the device copy (step_dev_) and the arrays it holds.
  // zero_copy_steps_: small uploads (kZeroCopyMetaBytes) by a kernel that reads the staging,
  // and argmax_rows_async's ids written by the argmax kernel into their slot: no copy-engine
  // transfer stands between a pipelined step and the next (CUDA_NOTES.md "Session 44").
  bool zero_copy_steps_ = true;
  static constexpr size_t kZeroCopyMetaBytes = size_t{64} << 10;
  void* meta_host_ = nullptr;
  size_t meta_host_bytes_ = 0;
  cudaEvent_t meta_event_ = nullptr;
  bool meta_event_pending_ = false;
  struct StepArray {
    const uint8_t* host;
    size_t bytes;
    const uint8_t* dev;
  };
  std::vector<StepArray> step_arrays_;
  int kv_bound_ = 0;

  // argmax_rows: device results and their pinned host copy (grown on demand, never in graphs).
  int32_t* argmax_dev_ = nullptr;
  int32_t* argmax_host_ = nullptr;
  int64_t argmax_cap_ = 0;
  void* argmax_scratch_ = nullptr;  // launch_argmax_rows's slices of rows (<= 64 rows; tickets zeroed)
  // argmax_rows_async: pinned slots of argmax_cap_ ids and the events of their downloads.
  int32_t* argmax_slot_host_[2] = {nullptr, nullptr};
  cudaEvent_t argmax_slot_event_[2] = {nullptr, nullptr};
  int64_t argmax_slot_n_[2] = {0, 0};
  // Sizes argmax_dev_ / argmax_host_ (and the slots) for n rows, keeping queued slots' ids.
  Status reserve_argmax(int64_t n);
  // Queues the argmax of logits into argmax_dev_ and its ids into argmax_host_ (slot -1) or
  // argmax_slot_host_[slot]: written by the kernel (zero_copy_steps_) or downloaded after it.
  Status launch_argmax(const Tensor& logits, int slot);
  // sample_rows: one pinned buffer holding the results, the top slots (launches with top
  // lists), the rows and the adjustments, and its device twin.
  void* sample_dev_ = nullptr;
  void* sample_host_ = nullptr;
  size_t sample_cap_ = 0;  // bytes

  // Graphs.
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    uint64_t epoch = 0;
  };
  std::map<uint64_t, Graph> graphs_;
  uint64_t epoch_ = 0;
  bool capturing_ = false;
  bool capture_failed_ = false;
  std::vector<void*> graveyard_;  // scratch buffers replaced during a capture

  bool fuse_ = true;
  bool attn_fill_ = true;
  // Which small kernels release the next one before their own wait (pdl_enter), so the GEMV
  // after them streams its first weights while they run (EMBER_CUDA_PDL_EARLY, for A/B runs):
  // bit 0 decode attention and its merge, bit 1 the norms. Attention only, measured on an H200
  // (session 15, batch-1 decode, same call): int4 408 / 415 -> 425 / 425 tok/s, fp8 and bf16
  // level; the norms' early release cost bf16 1-2% (217 -> 214).
  int pdl_early_ = 1;
  bool attn_rope_ = true;  // EMBER_CUDA_ATTN_ROPE=0: the rope + K/V store keeps its own launch
  // EMBER_CUDA_KEYS_AS_M=0: one-byte decode on the 16-row kernel (PagedAttnArgs::decode_keys_as_m)
  bool keys_as_m_ = true;
  bool wgmma_prefill_ = false;  // sm_90a prefill attention (EMBER_CUDA_WGMMA_PREFILL=0: the mma.sync kernel)
  int gemv_variant_ = -1;   // EMBER_CUDA_GEMV_VARIANT: forced BF16 GEMV variant (the GLU too where it takes it), for tuning
  int gemv_hold_ = 0;       // one-row BF16 GEMVs that fit one wave: hold variant 11 (default), 10 (EMBER_CUDA_GEMV_HOLD=3), none (=0)
  // The start gate of the held o GEMV (hold_gate.cuh): a batch-1 decode attention opens it at
  // HoldGate::point (EMBER_CUDA_HOLD_GATE=1..3, default 2: its Q staged; 0 none), the o GEMV after
  // it waits there before the loads HoldGateUse::parts names (EMBER_CUDA_HOLD_GATE_PARTS, default
  // 2: the shared-memory copy). docs/CUDA_NOTES.md "Session 47": bf16 batch 1 +0.6% on an H100
  // (the gate's first form). hold_gate_arrivals_ > 0: an attention of that many blocks just armed
  // it for the next GEMV launch.
  int hold_gate_point_ = 2;
  int hold_gate_parts_ = 2;
  // The same gate before a packed (int4 / fp8 / int8) o GEMV, whose first weight copies wait
  // there (qgemv_gate_takes): EMBER_CUDA_QGEMV_GATE=1..3 the attention's point, 0 none; unset
  // (-1) point 2 for int4 and fp8, none for int8 (two H100s, session 48: int4 +0.5% / +0.9%, fp8
  // +0.2% / +1.3%; int8 -1.5% on one, +0.5% on the other).
  int qgemv_gate_point_ = -1;
  uint32_t* hold_gate_words_ = nullptr;  // device [3] (HoldGate::words), null when off
  int hold_gate_arrivals_ = 0;
  uint64_t hold_gate_launches_ = 0;
  // A batch-1 decode attention held back for the o projection after it, which may take it into
  // its own kernel (attn_o_project, EMBER_CUDA_ATTN_O=1 or 2; off by default until measured, see
  // docs/CUDA_NOTES.md "Session 59"); any flush launches it as it was.
  struct PendingAttention {
    bool active = false;
    PagedAttnArgs args;
    AttnKernel kind = AttnKernel::Auto;
  };
  PendingAttention pat_;
  int attn_o_ = 0;  // EMBER_CUDA_ATTN_O: 1 attn_o.cuh's kernel, 2 attn_o_split.cuh's
  uint32_t* attn_o_counters_ = nullptr;  // [kAttnOSplitMaxChunks] (=2 only)
  Scratch attn_o_part_;                  // attn_o_split's per-head products
  int attn_o_threads_ = 512;  // EMBER_CUDA_ATTN_O_THREADS=256: blocks of 256 threads (A/B runs)
  int attn_o_rows_ = 32;      // EMBER_CUDA_ATTN_O_ROWS=64: int4 blocks of 64 o rows (A/B runs)
  uint64_t attn_o_launches_ = 0;
  // attn_o_one_wave by (format, K/V type, heads, K/V heads, max_kv, block size, m): an occupancy
  // query, too slow for every layer of an eager step.
  std::map<std::tuple<int, int, int, int, int, int, int64_t>, bool> attn_o_one_wave_;
  // The o projection attn_o_project saw last (format, rows; -1: none yet): an attention whose
  // cached answer for it is "not one wave" is not held, so that it keeps the o GEMV's gate (an
  // attention held and then flushed launches without it: int4 -2.4%, fp8 -2.6% on an H100,
  // session 60).
  int attn_o_last_format_ = -1;
  int64_t attn_o_last_m_ = 0;
  // The weights' type of the GEMV launched last (the q/k/v before an attention; F32: none yet).
  DType last_gemv_wtype_ = DType::F32;
  int decode_splits_ = 0;   // EMBER_CUDA_DECODE_SPLITS: forced decode split count, for tuning
  int prefill_mode_ = -1;   // EMBER_CUDA_PREFILL_MODE: the wgmma prefill schedule (-1 the default) ...
  int prefill_keys_ = 0;    // ... and its keys per tile
  int gemv_variant(int n, int64_t m, int64_t k) const;  // for n rows of x, m rows of weights
  PendingGemv pg_;
  PendingAdd pa_;
  PendingRope pr_;
  // The fused rope + K/V store of a step, held back by kv_store for the attention that follows,
  // whose decode kernel may do it (attention_decode_takes_rope); any other op launches it.
  RopeKvStoreArgs prs_;
  bool prs_active_ = false;
  // The q/k/v GEMV just launched with the rope + K/V store epilogue (GemvRope) for this q and
  // cache: the attention that follows copies earlier tokens' K/V before its PDL wait
  // (PagedAttnArgs::early_tiles). Any flush clears it.
  struct GemvRoped {
    bool active = false;
    const void* q = nullptr;
    const void* k_cache = nullptr;
    const void* v_cache = nullptr;
  };
  GemvRoped roped_;
  uint64_t gemv_rope_launches_ = 0;
  // Which formats' q/k/v GEMV takes the rope + K/V store (gemv_rope_for): the packed formats by
  // default, BF16 where the o projection is not held (EMBER_CUDA_GEMV_HOLD=0);
  // EMBER_CUDA_GEMV_ROPE=0 none, =1 every format (A/B runs). Batch 1 (docs/CUDA_NOTES.md
  // "Session 38", "Session 42"): int4 +0.9% / +1.1% and fp8 +0.05% / +1.0% (H200 / H100); int8
  // +0.6% on an H200 since the evict-first weights (session 42: 420.8-421.2 against 418.3-418.8
  // tok/s; -0.4% before them) and +0.7-0.8% on an H100; BF16 on an H100 -1.0% beside the hold
  // (both use the attention's window), and without the hold on an H200 0.6-1.3% below it.
  int gemv_rope_ = -1;  // -1 default, 0 none, 1 every format
  bool gemv_rope_for(DType wtype) const {
    if (gemv_rope_ != -1) return gemv_rope_ == 1;
    return wtype != DType::BF16 || gemv_hold_ == 0;
  }
  // The L2 prefetch of the next GEMV's weights (L2Prefetch; docs/CUDA_NOTES.md "Session 40" to
  // "Session 42"). Mode 1: a GEMV that takes it (qgemv_prefetch_takes, gemv_prefetch_takes: a
  // batch-1 step's down projection) prefetches the q/k/v GEMV (three matrices) that followed it
  // last; mode 2: whatever GEMV followed it. The cap: at most that many bytes of the next weights,
  // each matrix cut in proportion (0: all). By default the mode is the GPU's and format's
  // (l2_prefetch_default_mode: BF16 2 on an H100, off elsewhere).
  // EMBER_CUDA_NEXT_L2=0/1/2 sets the mode for every format, EMBER_CUDA_NEXT_L2_KB the cap in KiB,
  // EMBER_CUDA_NEXT_L2_WHEN L2Prefetch::when (default 0).
  int next_l2_ = -1;  // -1: by GPU and format (l2_prefetch_default_mode)
  bool next_l2_pays_ = false;  // l2_prefetch_pays_on(gpu_name_), once at creation
  size_t next_l2_cap_ = size_t{4} << 20;  // bytes; 0: all
  int next_l2_when_ = 0;
  int next_l2_mode(DType wtype) const {
    return next_l2_ != -1 ? next_l2_ : l2_prefetch_default_mode(next_l2_pays_, wtype);
  }
  // Which GEMV followed which (by their first matrices), as flush launched them: eager steps learn
  // it (each decode graph's shape runs one before its capture), so a GEMV knows its successor's
  // weights when it launches. last_gemv_w_: the GEMV launched last this step.
  std::unordered_map<const void*, L2Prefetch> next_gemv_;
  const void* last_gemv_w_ = nullptr;
  uint64_t next_l2_launches_ = 0;
  // Records pg_ (count matrices, about to launch) as the successor of the GEMV before it; returns
  // pg_'s own successor's weights as learned (null: none, or roped: the epilogue's kernels take no
  // prefetch). counted_prefetch: next where the launch takes it (counted), else null.
  const L2Prefetch* learn_next_gemv(int count, bool roped);
  const L2Prefetch* counted_prefetch(const L2Prefetch* next, bool takes);
  // Whether kv_store can hand pr_ (q's and k's rope) and the store of k, v into cache kv at
  // slots (device) to the pending q/k/v GEMV pg_.
  bool gemv_takes_rope(const KvLayer& kv, const float* k, const float* v, int64_t n, const int32_t* slots_dev) const;
  PendingNorm pn_;
  PendingGlu pgl_;
};

}  // namespace ember::cuda
