#pragma once
// Backend: the ops a model's forward pass needs, implemented per device (cpu/, cuda/).
// Models call only this interface, so one model file runs on every backend.
// Activations are F32 on the CPU backend; a backend may use another activation dtype
// internally as long as the Tensor it returns says so.
#include "core/status.h"
#include "core/tensor.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace ember {

// Memory owned by a backend (host memory for CPU, device memory for CUDA).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t size() const = 0;
};

struct RopeParams {
  int head_dim = 0;
  int rotary_dim = 0;          // dimensions rotated (== head_dim for all supported models)
  bool neox = true;            // true: rotate halves (HF rotate_half); false: interleaved pairs
  const float* inv_freq = nullptr;  // [rotary_dim / 2], scaling already applied (llama3, linear)
  float attention_factor = 1.0f;    // cos/sin multiplier (yarn); 1 otherwise
};

// K/V of one layer in paged blocks: [n_blocks, block_size, n_kv_heads, head_dim].
// For INT8 / FP8 storage, scales hold one float per (block, slot, kv head) (may be null for FP8).
struct KvLayer {
  Tensor k;
  Tensor v;
  float* k_scales = nullptr;  // [n_blocks, block_size, n_kv_heads]
  float* v_scales = nullptr;
  int block_size = 16;
};

// Which K/V each query token sees. Tokens of a batch are grouped by sequence.
struct AttentionBatch {
  int n_seqs = 0;
  const int32_t* query_start = nullptr;  // [n_seqs + 1] offsets of each sequence's tokens
  const int32_t* seq_lens = nullptr;     // [n_seqs] K/V length after this step's tokens
  const int32_t* block_tables = nullptr; // [n_seqs, max_blocks_per_seq] block ids
  int max_blocks_per_seq = 0;
};

struct AttentionParams {
  int n_heads = 0;
  int n_kv_heads = 0;          // n_heads % n_kv_heads == 0 (GQA, MQA when 1)
  int head_dim = 0;
  float scale = 1.0f;          // usually 1/sqrt(head_dim)
  int sliding_window = 0;      // 0: full causal; w: a query at pos p sees keys (p-w, p]
  float logit_softcap = 0.0f;  // 0: none
};

// One product of Backend::matmul_many: out = x @ w^T (+ bias).
struct MatmulTarget {
  const Tensor* w;
  const Tensor* bias;  // null or invalid: none
  Tensor* out;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  // Copies between host memory and a buffer of this backend (memcpy on the CPU).
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // Copies between two buffers of this backend, in order with the queued ops (CUDA: a
  // device-to-device copy in the stream, no host sync; CPU: memcpy). Regions must not overlap.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Waits for queued work (no-op on the CPU).
  virtual void synchronize() = 0;
  // Makes weights usable by this backend (CUDA: copy/convert to device; CPU: returns as is,
  // or repacks for faster kernels). The returned tensor lives as long as the backend.
  virtual Result<Tensor> prepare_weight(const Tensor& host_weight) = 0;

  // out[i, :] = table[ids[i], :]   table [n_vocab, d] any dtype, ids host [n], out [n, d]
  virtual void get_rows(const Tensor& table, const int32_t* ids, int n, Tensor& out) = 0;
  // out = x / rms(x) * w per row   x, out [n, d], w [d] F32 (models fold offsets into w);
  // out may alias x.
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) = 0;
  // out = x @ w^T (+ bias)   x [n, k], w [m, k] any dtype, bias [m] F32 or invalid, out [n, m]
  virtual void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) = 0;
  // Several matmuls of the same x (q/k/v, gate/up), in order; a backend may share the work
  // of x between them (the CPU quantizes x and forks its threads once). Same results as
  // calling matmul for each.
  virtual void matmul_many(const Tensor& x, std::span<const MatmulTarget> targets) {
    for (const MatmulTarget& t : targets) matmul(x, *t.w, t.bias, *t.out);
  }
  // acc += x @ w^T in one pass where the backend can (a GEMM that adds into its output);
  // false: nothing was done, and the caller runs matmul and add.   x [n, k], w [m, k], acc
  // [n, m] F32 (the residual stream: out projections of Llama-style layers)
  virtual bool matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& acc) {
    (void)x, (void)w, (void)acc;
    return false;
  }
  // Hint, given between the op that writes t and the op that reads it: that next reader is
  // the last before t is written again (t holds a temporary). A backend may then hand that
  // op t's values in the form it consumes (the e4m3 rows of an FP8 GEMM, say) and leave t
  // itself unwritten. Ignoring the hint is always correct; the CPU backend does.
  virtual void hint_read_once(const Tensor& t) { (void)t; }
  // Rotates x in place: x [n, n_heads, head_dim], positions host [n].
  virtual void rope(Tensor& x, const int32_t* positions, const RopeParams& p) = 0;
  // Writes this step's K/V into cache slots: k, v [n, n_kv_heads, head_dim], slots host [n]
  // (slot = block_id * block_size + offset; negative slots are skipped).
  virtual void kv_store(KvLayer& kv, const Tensor& k, const Tensor& v, const int32_t* slots) = 0;
  // Causal attention of each query token over its sequence's cached K/V (already holding
  // this step's tokens).   q, out [n, n_heads, head_dim]; a token at index j of its sequence
  // chunk has position seq_len - n_new + j.
  virtual void attention(const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                         const AttentionParams& p, Tensor& out) = 0;
  // out = act(gate) * up   gate, up, out [n, f]; act: silu (SwiGLU) or gelu-tanh (GeGLU);
  // out may alias gate.
  virtual void glu(const Tensor& gate, const Tensor& up, bool gelu_tanh, Tensor& out) = 0;
  // out = a + b (elementwise, same shape); out may alias a.
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // x *= s (elementwise).
  virtual void scale(Tensor& x, float s) = 0;
  // x = cap * tanh(x / cap) in place (F32): final logit soft-capping (Gemma 2), on the logits
  // where they are, so that device-side argmax and sampling see the capped values.
  virtual void softcap(Tensor& x, float cap) = 0;
  // ids[i] = the column of row i's largest value, the first on ties; NaN never wins, and a row
  // with nothing above -inf gives 0 (the host Sampler's plain greedy pick).   logits [n, vocab]
  // F32, ids host [n]. Backends without it say so.
  virtual Status argmax_rows(const Tensor& logits, int32_t* ids) {
    (void)logits;
    (void)ids;
    return Status::errorf("{}: no argmax_rows", name());
  }
  // Tensor parallelism: out = the sum of `in` over the ranks of the group this backend
  // belongs to (make_cpu_backend's group, join_cuda_tensor_parallel), queued in op order.
  // Every rank calls it with the same shape, in the same order of collectives.   in, out
  // F32, same shape; out may alias in. A backend outside a group has no such op.
  virtual Status all_reduce_sum(const Tensor& in, Tensor& out) {
    (void)in;
    (void)out;
    return Status::errorf("{}: not in a tensor-parallel group", name());
  }
};

}  // namespace ember
