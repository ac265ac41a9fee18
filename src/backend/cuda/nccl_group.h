#pragma once
// NCCL for tensor-parallel CUDA ranks (nccl_group.cpp). Built without NCCL (EMBER_HAVE_NCCL
// undefined), the same functions report that NCCL is missing.
#include "core/status.h"

#include <cuda_runtime.h>

#include <cstddef>

namespace ember::cuda {

// out = the sum of in over the communicator's ranks (n floats), queued on stream.
Status nccl_all_reduce_sum_f32(void* comm, const float* in, float* out, size_t n, cudaStream_t stream);
void nccl_comm_destroy(void* comm);

}  // namespace ember::cuda
