#pragma once
// The CUDA backend (Hopper first, any sm_80+ GPU by PTX): F32 activations in device memory,
// weights in BF16 (F32/F16/BF16 converted on the GPU; GGUF quantized types dequantized on the
// host at load), dense GEMM through cuBLASLt, a bandwidth-bound GEMV for decode batches of
// 1-4 rows, tensor-core paged attention. All work runs on one stream owned by the backend.
//
// Beyond the Backend interface, CudaStep (below) is what a runner uses to run whole steps
// fast: per-step metadata in one upload, CUDA graphs of decode steps, free-memory queries.
#include "backend/backend.h"
#include "backend/cuda/sample.cuh"
#include "core/status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ember {

// Null (with the reason logged) when the device cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device);
// The same, with the reason as a Status.
Result<std::unique_ptr<Backend>> create_cuda_backend(int device);
// Makes the CUDA backends (one per GPU, created on the threads that will drive them) the
// ranks of one tensor-parallel group, in order: an NCCL communicator each
// (ncclCommInitAll), used by their all_reduce_sum on their streams. Error when a backend is
// not a CUDA one, two share a GPU, or ember was built without NCCL.
Status join_cuda_tensor_parallel(const std::vector<Backend*>& ranks);

struct HostArray {
  const void* data = nullptr;
  size_t bytes = 0;
};

struct GpuMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// Step-level controls of a CUDA backend (cuda_step(backend) returns them, null for others).
class CudaStep {
 public:
  virtual ~CudaStep() = default;

  // Copies this step's host metadata arrays (token ids, positions, slots, block tables, ...)
  // to one persistent device buffer with a single upload (through pinned memory). Until the
  // next call, an op given a host pointer inside one of these arrays reads the device copy
  // instead of uploading its own: no per-op copies, and fixed device addresses that a graph
  // can capture. Arrays are laid out in order at 16-byte aligned offsets, so the same sizes
  // in the same order give the same addresses. The arrays must stay unchanged until the
  // step's work has been queued.
  virtual void set_step_metadata(const std::vector<HostArray>& arrays) = 0;
  virtual void clear_step_metadata() = 0;

  // Decode attention plans its key-range splits for this many keys (0: the batch's longest
  // sequence), so that a graph captured now stays right for any length up to the bound.
  virtual void set_decode_kv_bound(int max_kv) = 0;

  // CUDA graphs. Between begin_capture() and end_capture(key) ops are recorded, not run; the
  // graph is stored under key. A capture fails (error, nothing stored) when an op needed
  // host data outside the step metadata. launch_graph(key) replays it and returns false when
  // no valid graph is stored (none captured, or device buffers it used were reallocated).
  virtual Status begin_capture() = 0;
  virtual Status end_capture(uint64_t key) = 0;
  virtual bool launch_graph(uint64_t key) = 0;
  virtual void drop_graphs() = 0;
  virtual size_t num_graphs() const = 0;
  // Launches so far of a packed q/k/v GEMV that also did the rope and the K/V store (GemvRope in
  // qgemv.cuh; a captured launch counts once, at capture): tests check that the path ran.
  virtual uint64_t gemv_rope_launches() const = 0;
  // Launches so far of a GEMV (packed or BF16) that prefetched the next GEMV's weights into L2
  // (EMBER_CUDA_NEXT_L2; L2Prefetch in l2_prefetch.h; counted as gemv_rope_launches is).
  virtual uint64_t next_l2_launches() const = 0;
  // Launches so far of a held o GEMV that waited at its attention's start gate (hold_gate.cuh;
  // counted as gemv_rope_launches is), and how many of their blocks went ahead because the gate
  // stayed shut for kHoldGateTimeoutNs (read from the device after the stream's work).
  virtual uint64_t hold_gate_launches() const = 0;
  // Launches so far of the batch-1 decode attention fused with the o projection (attn_o.cuh,
  // EMBER_CUDA_ATTN_O; counted as gemv_rope_launches is).
  virtual uint64_t attn_o_launches() const = 0;
  virtual uint64_t hold_gate_timeouts() = 0;

  virtual Result<GpuMemoryInfo> memory_info() = 0;

  // Makes the backend's GPU the calling thread's current device (the thread that runs a step
  // need not be the one that created the backend).
  virtual void make_current() = 0;

  // How prepare_weight stores the matrices it prepares from now on: "bf16" (or "auto", the
  // default), "int4" (weight-only int4, group 128, bf16 scales, round-to-nearest at load),
  // "fp8" (e4m3, one f32 scale per output row) or "int8" (symmetric, one f32 scale per output
  // row). Vectors stay F32; see qgemv.cuh.
  virtual Status set_weight_format(const std::string& name) = 0;

  // Greedy tokens without downloading the logits: host_out[r] = the index of the largest
  // value of row r of logits ([n, vocab] F32 in device memory, queued work included; NaN never
  // wins, the lowest index wins ties, a row without a value above -inf gives 0; see
  // sample.cuh). Downloads n ints and waits for the stream.
  virtual Status argmax_rows(const Tensor& logits, int32_t* host_out) = 0;

  // Pipelined greedy steps. argmax_rows_async queues argmax_rows's kernel and the download of
  // its n ids into pinned slot `slot` (0 or 1) and returns without waiting;
  // argmax_rows_wait(slot, ...) waits for that download and copies the ids out. feed_tokens
  // queues the replacement of this step's input tokens before its kernels: token_ids and feed
  // are host pointers inside the current step metadata (n entries each), and token i becomes
  // the id the last queued argmax picked for its row feed[i] wherever feed[i] >= 0.
  virtual Status argmax_rows_async(const Tensor& logits, int slot) = 0;
  virtual Status argmax_rows_wait(int slot, int32_t* host_out, int64_t n) = 0;
  virtual Status feed_tokens(const int32_t* token_ids, const int32_t* feed, int n) = 0;

  // Sampled tokens without downloading the logits: out[i] for rows[i] over logits ([n, vocab]
  // F32 device memory, queued work included), by the host Sampler's rules for the parameters
  // DeviceSampleRow carries (sample.cuh); adj holds the rows' token adjustments (row i's are
  // adj[adj_begin, adj_begin + n_adj), ids strictly ascending in [0, vocab); checked). top:
  // when some row has n_top > 0 (each in [0, kSampleMaxTop]; checked), [rows.size(),
  // kSampleMaxTop] with row i's min(n_top, vocab) alternatives first in its slots; else empty.
  // One upload (rows + adjustments), one kernel, one download of the results (and the top
  // slots); waits for the stream.
  virtual Status sample_rows(const Tensor& logits, const std::vector<cuda::DeviceSampleRow>& rows,
                             const std::vector<cuda::DeviceSampleAdj>& adj, std::vector<cuda::DeviceSampleOut>& out,
                             std::vector<cuda::DeviceSampleTop>& top) = 0;
};

CudaStep* cuda_step(Backend& backend);

}  // namespace ember
