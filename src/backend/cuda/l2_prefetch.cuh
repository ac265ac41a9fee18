#pragma once
// The device side of L2Prefetch (l2_prefetch.h).
#include "backend/cuda/l2_prefetch.h"

#include <cstdint>

namespace ember::cuda {

// Slice `slice` of the ranges' concatenation (P.per_slice bytes each: l2_prefetch_plan) into L2:
// one bulk prefetch for each range the slice overlaps (one thread calls it: the copy engine splits
// a prefetch into lines). A slice past the end asks for nothing.
__device__ __forceinline__ void l2_prefetch_slice(const L2Prefetch& P, uint32_t slice) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint64_t lo64 = static_cast<uint64_t>(slice) * P.per_slice;
  if (lo64 >= P.total) return;
  const uint32_t lo = static_cast<uint32_t>(lo64);
  const uint32_t hi = static_cast<uint32_t>(min(lo64 + P.per_slice, static_cast<uint64_t>(P.total)));
  uint32_t base = 0;
#pragma unroll
  for (int i = 0; i < kL2PrefetchRanges; ++i) {
    if (i < P.n) {
      const uint32_t s = max(lo, base), e = min(hi, base + P.bytes[i]);
      if (s < e)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(static_cast<const uint8_t*>(P.p[i]) + (s - base)),
                     "r"(e - s)
                     : "memory");
      base += P.bytes[i];
    }
  }
#endif
}

}  // namespace ember::cuda
