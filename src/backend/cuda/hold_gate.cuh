#pragma once
// A start gate between a batch-1 decode attention and the held o GEMV after it
// (EMBER_CUDA_HOLD_GATE; docs/CUDA_NOTES.md "Session 47"). The attention releases the o GEMV's
// blocks at its entry, so they are resident while it waits; without the gate they then issue all
// of the o weights' loads at once (~33 MB at Llama-3-8B), a queue in the memory system that the
// q/k/v GEMV's completion and the attention's own small loads and stores wait behind. With the
// gate, each attention block arrives at a chosen point (after its PDL wait, after its Q is staged,
// or after its key loop) with a reduction it does not wait for, and the o blocks issue the loads
// the gate holds only once every block has arrived. A hint for timing only: the o GEMV's inputs
// are ordered by its PDL wait as before, and a block that finds the gate shut for
// kHoldGateTimeoutNs goes ahead (so a gate nobody opens costs time, never a hang; such blocks are
// counted). The packed (int4 / fp8 / int8) o GEMV's staged kernel waits likewise before its ring's
// first copies (qgemv_staged.cu, kGate; HoldGateUse::parts does not apply there), since session
// 48. The o GEMV's last block through sets the count back to zero: arrivals that come after
// a timeout, or from an attention whose next GEMV took no gate, let the next gated o GEMV through
// early once, and are then gone.
#include <cstdint>

namespace ember::cuda {

// The attention's side.
struct HoldGate {
  uint32_t* words = nullptr;  // device [3]: arrivals, o blocks passed, blocks that timed out
  int point = 0;              // 1 after its PDL wait, 2 Q staged, 3 after its keys (0: off)
};

// The o GEMV's side: the words, the arrivals that open the gate (the attention's blocks), and
// which of its loads wait (bit 0 the rows it loads into registers, bit 1 the rows it copies into
// shared memory).
struct HoldGateUse {
  uint32_t* words = nullptr;  // null: no gate
  int arrivals = 0;
  int parts = 3;
};

constexpr unsigned long long kHoldGateTimeoutNs = 40000;

#ifdef __CUDACC__
// An attention block arrives (thread 0, the block past `point`).
__device__ __forceinline__ void hold_gate_arrive(const HoldGate& g, int point) {
  if (g.words == nullptr || g.point != point || threadIdx.x != 0) return;
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(g.words) : "memory");
}

// An o GEMV block (every thread) waits for `arrivals` arrivals; the last block through clears the
// count.
__device__ __forceinline__ void hold_gate_pass(uint32_t* words, int arrivals) {
  if (words == nullptr) return;
  if (threadIdx.x == 0) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {
      uint32_t n;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(n) : "l"(words) : "memory");
      if (n >= static_cast<uint32_t>(arrivals)) break;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      if (t - t0 > kHoldGateTimeoutNs) {
        atomicAdd(&words[2], 1u);  // (counted for the tests: hold_gate_timeouts)
        break;
      }
      __nanosleep(200);
    }
    const unsigned grid = gridDim.x * gridDim.y * gridDim.z;
    if (atomicAdd(&words[1], 1u) == grid - 1) {
      words[1] = 0;
      atomicExch(&words[0], 0u);
    }
  }
  __syncthreads();
}
#endif

}  // namespace ember::cuda
