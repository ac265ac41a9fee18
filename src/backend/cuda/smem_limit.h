#pragma once
// Raising a kernel's dynamic shared-memory limit (cudaFuncAttributeMaxDynamicSharedMemorySize)
// once per kernel and GPU: the attribute belongs to the device that is current when it is set,
// so a process driving several GPUs (tensor parallel) sets it on each; and a launch recorded
// in a graph capture must not set it, which holds because a shape's first launch is eager.
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

namespace ember::cuda {

// Dynamic shared memory a block may opt in to on the current device (0 when it cannot be read).
inline int smem_optin_bytes() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return 0;
  return bytes;
}

inline cudaError_t raise_smem_limit(const void* kernel, int bytes) {
  struct Entry {
    const void* kernel;
    int device;
    cudaError_t result;
  };
  static std::mutex mu;
  static std::vector<Entry> done;
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& d : done)
    if (d.kernel == kernel && d.device == device) return d.result;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  done.push_back({kernel, device, e});
  return e;
}

}  // namespace ember::cuda
