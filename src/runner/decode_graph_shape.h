#pragma once
// The shapes of the decode steps ModelRunner captures CUDA graphs for. A graph is keyed by
// its batch size and its block-table width, and a step of another shape runs in the graph of
// the next larger one, padded:
//   - widths: the next power of two >= 16 blocks, so that a growing sequence keeps its graph
//     for a while (decode attention plans for the longest sequence of the bucket);
//   - batch sizes: exact up to 16 sequences (the interactive batches, where a padded row
//     would cost a visible share of a memory-bound step), then multiples of 8, as vLLM pads
//     its captured sizes. Without the multiples a serving engine whose batch drifts through
//     1..256 sequences captured up to 256 graphs a width (~5 MB each at Llama-3-8B shapes, and
//     an eager step plus a capture for each new size); with them at most 46.
// Pure arithmetic, no CUDA: the CPU tests check it.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace ember {

inline constexpr int kDecodeGraphExactSeqs = 16;  // batch sizes captured as they are
inline constexpr int kDecodeGraphSeqStep = 8;     // larger ones padded to a multiple of this

// The batch size of the graph that runs a decode step of n sequences, never past `cap` (the
// largest batch the runner's buffers were sized for; 0: no padding at all).
constexpr int padded_decode_seqs(int n, int cap) {
  if (n <= kDecodeGraphExactSeqs || cap <= n) return n;
  const int up = (n + kDecodeGraphSeqStep - 1) / kDecodeGraphSeqStep * kDecodeGraphSeqStep;
  return std::min(up, cap);
}

// The distinct graph batch sizes of steps of 1..max_n sequences, largest first.
inline std::vector<int> decode_graph_sizes(int max_n, int cap) {
  std::vector<int> sizes;
  for (int n = max_n; n >= 1; --n) {
    const int p = padded_decode_seqs(n, cap);
    if (sizes.empty() || sizes.back() != p) sizes.push_back(p);
  }
  return sizes;
}

// Block-table width of a graph: the next power of two >= 16 blocks.
constexpr int decode_width_bucket(int blocks) {
  int w = 16;
  while (w < blocks) w *= 2;
  return w;
}

// A decode graph's key: its batch size (padded) and its width (bucketed).
constexpr uint64_t decode_graph_key(int n_seqs, int width) {
  return (static_cast<uint64_t>(n_seqs) << 32) | static_cast<uint64_t>(width);
}

}  // namespace ember
