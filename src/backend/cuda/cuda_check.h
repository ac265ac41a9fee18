#pragma once
// Checks of CUDA runtime calls in host code. The Backend ops return void, so a failed call
// inside an op is treated as a broken invariant (bad arguments or a dead device) and aborts
// with file:line; boundaries that return Status use EMBER_CUDA_TRY instead.
#include "core/check.h"
#include "core/status.h"

#include <cuda_runtime.h>

#define EMBER_CUDA_CHECK(expr)                                                        \
  do {                                                                                \
    const cudaError_t _e = (expr);                                                    \
    EMBER_CHECK(_e == cudaSuccess, "{}: {}", #expr, cudaGetErrorString(_e));          \
  } while (0)

#define EMBER_CUDA_TRY(expr)                                                          \
  do {                                                                                \
    const cudaError_t _e = (expr);                                                    \
    if (_e != cudaSuccess)                                                            \
      return ::ember::Status::errorf("{}: {}", #expr, cudaGetErrorString(_e));        \
  } while (0)
