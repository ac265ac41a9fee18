#pragma once
// One-shot all-reduce over peer-to-peer GPU memory (NVLink) for the small sums of tensor-
// parallel decode steps, where NCCL's per-call latency dominates (64 all-reduces a Llama-3-8B
// step). One launch per rank, no host involvement, capturable in CUDA graphs.
//
// Every rank owns, in its own device memory, receive slots [2][n_ranks][kP2pMaxElems] F32, flags
// [kP2pMaxBlocks][n_ranks] and epoch counters [kP2pMaxBlocks]. Block b of rank r's launch
// takes chunk b of the elements: it writes its input chunk into slot [e & 1][r] of every rank
// (remote stores), fences, stores its epoch e into flag [b][r] of every rank, waits until its
// own flags [b][*] reach e, and sums the chunk over the slots [e & 1][*] in rank order (every
// rank gets the same bits). Epochs count the launches per block on each rank, alike on every
// rank because every rank makes the same sequence of calls. Two slot sets suffice: a rank
// writes set e & 1 again at epoch e + 2, after it saw the peers' flags of epoch e + 1, which
// they store only after they finished reading epoch e.
#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

constexpr int kP2pMaxRanks = 8;
constexpr int64_t kP2pMaxElems = int64_t{1} << 16;  // 256 KiB of F32: decode batches up to 16 x 4096
constexpr int kP2pChunk = 1024;                     // elements a block
constexpr int kP2pMaxBlocks = static_cast<int>(kP2pMaxElems / kP2pChunk);

struct P2pRank {
  int rank = 0, n_ranks = 0;
  float* slots[kP2pMaxRanks] = {};     // rank p's receive slots (device memory of p)
  uint32_t* flags[kP2pMaxRanks] = {};  // rank p's flags
  uint32_t* epochs = nullptr;          // this rank's counters
};

// out = the sum over the ranks of their in (n floats, n <= kP2pMaxElems; out may alias in);
// every rank launches it with the same n, in the same order of calls, never as a programmatic
// dependent (it reads in at once).
cudaError_t launch_p2p_all_reduce(const P2pRank& p, const float* in, float* out, int64_t n, cudaStream_t stream);

}  // namespace ember::cuda
