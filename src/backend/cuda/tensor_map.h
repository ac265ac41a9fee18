#pragma once
// TMA tensor maps of weight matrices, shared by the kernels that feed shared memory with the
// TMA unit (qgemv_wg.cu's wgmma GEMV, qgemv_staged.cu's TMA ring). The encoder comes from the
// driver through the runtime, so the library does not link against libcuda; the maps are cached
// by address because a decode step launches the same few hundred matrices every step.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

namespace ember::cuda {

// cuTensorMapEncodeTiled, or null where the driver lacks it.
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// What a cached map was made from: the matrix's address, its shape and the caller's layout.
struct TensorMapKey {
  const void* w = nullptr;
  int64_t rows = 0, cols = 0;
  int layout = 0;
  bool operator==(const TensorMapKey& o) const {
    return w == o.w && rows == o.rows && cols == o.cols && layout == o.layout;
  }
};

// The map of `key` from the cache (1024 entries by address; each caller's Make has its own), or
// made by make(CUtensorMap*) -> bool and kept where that succeeds.
template <class Make>
bool cached_tensor_map(const TensorMapKey& key, CUtensorMap* map, Make make) {
  struct Entry {
    TensorMapKey key;
    CUtensorMap map;
  };
  static std::mutex mu;
  static Entry cache[1024];
  Entry& e = cache[(reinterpret_cast<uintptr_t>(key.w) >> 8) % 1024];
  std::lock_guard<std::mutex> lock(mu);
  if (e.key.w != nullptr && e.key == key) {
    *map = e.map;
    return true;
  }
  if (!make(map)) return false;
  e = Entry{key, *map};
  return true;
}

}  // namespace ember::cuda
