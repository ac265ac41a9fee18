// The probe's host side (probe.cuh): the buffer, and the CSV of two decode graph launches.
// Compiled to nothing without EMBER_PROBE (cmake -DEMBER_CUDA_PROBE=ON).
#include "backend/cuda/probe.cuh"

#ifdef EMBER_PROBE
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace ember::cuda::probe {
void before_graph(cudaStream_t stream) {
  static const long at = [] {
    const char* e = std::getenv("EMBER_PROBE_AT");
    return e ? std::atol(e) : -1L;
  }();
  static long n = 0;
  static Rec* buf = nullptr;
  static unsigned int* cnt = nullptr;
  constexpr unsigned int kCap = 1u << 24;  // 512 MiB of records
  if (at < 0) return;
  if (n == at) {
    cudaStreamSynchronize(stream);
    cudaMalloc(&buf, sizeof(Rec) * kCap);
    cudaMalloc(&cnt, sizeof(unsigned int));
    cudaMemset(cnt, 0, sizeof(unsigned int));
    cudaMemset(buf, 0, sizeof(Rec) * kCap);
    cudaDeviceSynchronize();
    set_all(buf, cnt, kCap);
  }
  if (n == at + 2) {
    cudaStreamSynchronize(stream);
    set_all(nullptr, nullptr, 0);
    unsigned int c = 0;
    cudaMemcpy(&c, cnt, sizeof(c), cudaMemcpyDeviceToHost);
    if (c > kCap) c = kCap;
    std::vector<Rec> h(c);
    cudaMemcpy(h.data(), buf, sizeof(Rec) * c, cudaMemcpyDeviceToHost);
    const char* path = std::getenv("EMBER_PROBE_OUT");
    FILE* f = std::fopen(path ? path : "probe.csv", "w");
    if (f) {
      std::fprintf(f, "gt,clk,kind,ev,idx,sm,blk,m,k\n");
      for (const Rec& r : h)
        if (r.gt != 0) std::fprintf(f, "%llu,%llu,%u,%u,%u,%u,%u,%u,%u\n", r.gt, r.clk, r.tag & 0xff, (r.tag >> 8) & 0xff,
                     r.tag >> 16, r.smblk & 0xff, r.smblk >> 8, r.m, r.k);
      std::fclose(f);
    }
    std::fprintf(stderr, "probe: %u records of graph launches %ld..%ld\n", c, at, at + 1);
  }
  ++n;
}
}  // namespace ember::cuda::probe
#endif
