#pragma once
// A trivial dependent kernel for bench_cuda_kernels pdl-chain (pdl_chain.cu).
#include <cuda_runtime.h>

namespace ember::cuda::bench {

// buf: 2 * blocks floats.
cudaError_t launch_chain_kernel(float* buf, int blocks, int threads, bool pdl, cudaStream_t stream);

}  // namespace ember::cuda::bench
