#pragma once
// Timing of short GPU work for the CUDA benchmarks: `per_graph` launches captured into one CUDA
// graph, replayed `reps` times, the median per launch. One graph launch amortizes the host's
// launch cost, so back-to-back kernels are timed as a decode step runs them.
#include "backend/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace ember::cuda::bench {

// Median milliseconds per launch(i) call; launch returns false when its work could not be
// enqueued (an unsupported configuration): then -1. `warmup` calls run first, outside the
// graph (module load, cuBLASLt plans).
inline double graph_median_ms(cudaStream_t s, int per_graph, int reps, int warmup,
                              const std::function<bool(int)>& launch) {
  for (int i = 0; i < warmup; ++i)
    if (!launch(i)) return -1.0;
  EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EMBER_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  bool ok = true;
  for (int i = 0; i < per_graph; ++i) ok = ok && launch(i);
  EMBER_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  if (!ok) {
    EMBER_CUDA_CHECK(cudaGraphDestroy(graph));
    return -1.0;
  }
  EMBER_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  EMBER_CUDA_CHECK(cudaGraphLaunch(exec, s));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  EMBER_CUDA_CHECK(cudaEventCreate(&a));
  EMBER_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    EMBER_CUDA_CHECK(cudaEventRecord(a, s));
    EMBER_CUDA_CHECK(cudaGraphLaunch(exec, s));
    EMBER_CUDA_CHECK(cudaEventRecord(b, s));
    EMBER_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    EMBER_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / per_graph);
  }
  EMBER_CUDA_CHECK(cudaGraphExecDestroy(exec));
  EMBER_CUDA_CHECK(cudaGraphDestroy(graph));
  EMBER_CUDA_CHECK(cudaEventDestroy(a));
  EMBER_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace ember::cuda::bench
