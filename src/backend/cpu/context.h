#pragma once
// What every CPU op needs: the thread pool, the kernel table chosen at construction, and
// scratch memory that is reused across calls (one buffer per thread plus a shared one).
#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/check.h"
#include "core/thread_pool.h"

#include <cstdlib>
#include <memory>
#include <vector>

namespace ember::cpu {

// Growable 64-byte aligned scratch; contents are not preserved across growth.
class ScratchBuffer {
 public:
  uint8_t* ensure(size_t bytes) {
    if (bytes > capacity_) {
      const size_t cap = (bytes + 4095) / 4096 * 4096;
      data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, cap)));
      EMBER_CHECK(data_ != nullptr, "out of memory allocating {} bytes of scratch", cap);
      capacity_ = cap;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t capacity_ = 0;
};

// cos/sin of one rope call's positions, reused by the next calls with the same positions and
// frequencies (q and k of every layer of a step: 2 x n_layers calls share one table; Gemma's
// local and global frequencies take two entries).
struct RopeTable {
  std::vector<float> inv_freq;  // the values (a pointer could be reused by another model)
  float attention_factor = 0.0f;
  int half = 0;
  std::vector<int32_t> positions;
  std::vector<float> cos_sin;  // [n][2 * half]: cos, then sin
};

struct CpuContext {
  explicit CpuContext(int n_threads, Isa isa)
      : pool(n_threads), kt(make_kernel_table(isa)), thread_scratch(static_cast<size_t>(pool.size())) {}
  ThreadPool pool;
  KernelTable kt;
  ScratchBuffer shared_scratch;
  std::vector<ScratchBuffer> thread_scratch;  // [n_threads]; thread ith touches only its own
  // Row results independent of the batch: no panel GEMM (its sums run in another order than
  // the row kernels'), attention scores by one dot kernel for any tile shape, key tiles on a
  // fixed grid, no flash-decoding splits (see make_cpu_backend).
  bool batch_invariant = false;
  std::vector<RopeTable> rope_tables = std::vector<RopeTable>(4);
  size_t rope_next = 0;  // round-robin slot for the next table
};

void cpu_get_rows(CpuContext& ctx, const Tensor& table, const int32_t* ids, int n, Tensor& out);
void cpu_rms_norm(CpuContext& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& out);
void cpu_matmul(CpuContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
void cpu_matmul_many(CpuContext& ctx, const Tensor& x, std::span<const MatmulTarget> targets);
void cpu_rope(CpuContext& ctx, Tensor& x, const int32_t* positions, const RopeParams& p);
void cpu_kv_store(CpuContext& ctx, KvLayer& kv, const Tensor& k, const Tensor& v, const int32_t* slots);
void cpu_attention(CpuContext& ctx, const Tensor& q, const KvLayer& kv, const AttentionBatch& batch,
                   const AttentionParams& p, Tensor& out);
void cpu_glu(CpuContext& ctx, const Tensor& gate, const Tensor& up, bool gelu_tanh, Tensor& out);
void cpu_add(CpuContext& ctx, const Tensor& a, const Tensor& b, Tensor& out);
void cpu_scale(CpuContext& ctx, Tensor& x, float s);
void cpu_softcap(CpuContext& ctx, Tensor& x, float cap);
Status cpu_argmax_rows(CpuContext& ctx, const Tensor& logits, int32_t* ids);

// Splits [0, n) into nth chunks whose boundaries are multiples of `align` (the last chunk
// takes the remainder); returns chunk ith.
struct Range {
  int64_t begin;
  int64_t end;
};
Range split_range(int64_t n, int ith, int nth, int64_t align = 1);

}  // namespace ember::cpu
