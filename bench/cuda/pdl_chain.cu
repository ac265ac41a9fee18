// The floor of a kernel boundary in a decode step: chains of trivial dependent kernels in one
// CUDA graph, with and without programmatic dependent launch, each kernel reading what the one
// before wrote (so the dependency is real). `bench_cuda_kernels pdl-chain`.
#include "backend/cuda/device_util.cuh"
#include "pdl_chain.h"

namespace ember::cuda::bench {

namespace {

// Each block reads its predecessor's value of a neighbouring block and writes its own.
__global__ void chain_kernel(float* __restrict__ buf, int n_blocks) {
  pdl_wait();
  pdl_launch_dependents();
  if (threadIdx.x == 0) {
    const float prev = buf[(blockIdx.x + 1) % n_blocks];
    buf[n_blocks + blockIdx.x] = prev + 1.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0) buf[blockIdx.x] = buf[n_blocks + blockIdx.x];
}

}  // namespace

cudaError_t launch_chain_kernel(float* buf, int blocks, int threads, bool pdl, cudaStream_t stream) {
  return launch_kernel(chain_kernel, dim3(blocks), dim3(threads), 0, stream, pdl, buf, blocks);
}

}  // namespace ember::cuda::bench
