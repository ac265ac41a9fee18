#pragma once
// The rope + K/V store epilogue of a one-row q/k/v GEMV (the packed GEMV of qgemv.cuh and the
// BF16 GEMV of gemv.cuh): the kernel rotates q and k (neox pairs, the whole head) as
// launch_rope_kv_store does, writes q, k and v as F32 like the plain GEMV, and stores the k and v
// rows into a BF16 / F16 cache at their slots, so the decode attention after it needs no rope or
// store of its own. Each kernel reads the rows of a rotated pair, i and D/2 + i of a head, in one
// task (the packed GEMV: rows g and g + 8 of a 16-row tile; the BF16 GEMV: a warp's two rows), so
// the pair meets in one thread or one thread pair. head_dim 0: no such epilogue.
#include <cstdint>

namespace ember::cuda {

struct GemvRope {
  const int32_t* positions = nullptr;  // device [n]
  const float* inv_freq = nullptr;     // device [head_dim / 2]
  const int32_t* slots = nullptr;      // device [n]; < 0: not stored
  float factor = 1.0f;
  int head_dim = 0;
  void* k_cache = nullptr;  // [n_slots, k rows / head_dim, head_dim] (the k segment's m per slot)
  void* v_cache = nullptr;
  bool cache_bf16 = true;  // else F16
};

}  // namespace ember::cuda
