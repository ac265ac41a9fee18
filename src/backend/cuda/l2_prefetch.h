#pragma once
// An L2 prefetch of the weights of the GEMV after this one (EMBER_CUDA_NEXT_L2), for the packed
// GEMV (qgemv.cuh) and the BF16 GEMV (gemv.cuh): the blocks of this GEMV that take part ask L2
// for slices of the next GEMV's matrices (cp.async.bulk.prefetch.L2: l2_prefetch.cuh), so that the
// next GEMV, whose blocks enter only as these leave, reads them from L2 instead of waiting on DRAM
// after this GEMV's tail. A hint: results are the same with or without it.
#include "backend/cuda/gpu_kind.h"
#include "core/dtype.h"

#include <cstdint>
#include <string_view>

namespace ember::cuda {

constexpr int kL2PrefetchRanges = 4;

struct L2Prefetch {
  const void* p[kL2PrefetchRanges] = {};
  uint32_t bytes[kL2PrefetchRanges] = {};  // multiples of 16 (p 16-byte aligned)
  int n = 0;
  // Bytes a slice (set by the launcher from its grid: l2_prefetch_plan) and in all.
  uint32_t per_slice = 0, total = 0;
  // When a block asks: 0 as it issues its last weight loads (the packed GEMV: the last chunk of its
  // last tile; the BF16 GEMV has no such point and takes 0 as 1), 1 after its last tile, 2 right
  // after its PDL wait.
  int when = 0;
};

// Whether p holds only well-formed ranges (n in 0..kL2PrefetchRanges, aligned, multiples of 16,
// less than 4 GiB in all).
inline bool l2_prefetch_valid(const L2Prefetch& p) {
  if (p.n < 0 || p.n > kL2PrefetchRanges) return false;
  uint64_t total = 0;
  for (int i = 0; i < p.n; ++i) {
    if (reinterpret_cast<uintptr_t>(p.p[i]) % 16 != 0 || p.bytes[i] % 16 != 0) return false;
    total += p.bytes[i];
  }
  return total <= UINT32_MAX;
}

// p with its slices set for n_slices blocks (p valid; the device then does 32-bit arithmetic).
inline L2Prefetch l2_prefetch_plan(L2Prefetch p, uint32_t n_slices) {
  uint64_t total = 0;
  for (int i = 0; i < p.n; ++i) total += p.bytes[i];
  p.total = static_cast<uint32_t>(total);
  p.per_slice = n_slices == 0 ? 0 : static_cast<uint32_t>((total + n_slices - 1) / n_slices + 15) / 16 * 16;
  return p;
}

// Whether the prefetch pays by default on the GPU named gpu_name (cudaDeviceProp::name): on an
// H100 only (docs/CUDA_NOTES.md "Session 41": bf16 =2 +0.7%, and again in session 54); on an H200
// it loses (session 42: bf16 243.1 against 243.9 tok/s, int4 564.4 against 566.0, and no cap from
// 1 to 16 MiB gains), so every other GPU runs without it.
inline bool l2_prefetch_pays_on(std::string_view gpu_name) { return gpu_is_h100(gpu_name); }

// The mode a GEMV of weights wtype gets by default where the prefetch pays (l2_prefetch_pays_on):
// 0 off, 1 the batch-1 down GEMV prefetches the q/k/v GEMV after it, 2 every GEMV its successor,
// capped at 4 MiB (CudaBackend::next_l2_cap_). fp8 and int8 lose at every cap (session 41); int4
// at 1 gained 0.3% in session 41 but lost 0.3-0.5% in three calls of session 54 on H100s (since
// then the packed o GEMV waits at the attention's start gate and steps copy nothing between
// them), so the packed formats run without it.
inline int l2_prefetch_default_mode(bool pays, DType wtype) {
  if (!pays) return 0;
  return wtype == DType::BF16 ? 2 : 0;
}

}  // namespace ember::cuda
