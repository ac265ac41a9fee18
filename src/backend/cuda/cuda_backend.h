#pragma once
// The CUDA backend (Hopper first, any sm_80+ GPU by PTX): F32 activations in device memory,
// weights in BF16 (F32/F16/BF16 converted on the GPU; GGUF quantized types dequantized on the
// host at load), dense GEMM through cuBLASLt, a bandwidth-bound GEMV for decode batches of
// 1-4 rows, tensor-core paged attention. All work runs on one stream owned by the backend.
#include "backend/backend.h"
#include "core/status.h"

#include <memory>

namespace ember {

// Null (with the reason logged) when the device cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device);
// The same, with the reason as a Status.
Result<std::unique_ptr<Backend>> create_cuda_backend(int device);

}  // namespace ember
