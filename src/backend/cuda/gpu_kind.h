#pragma once
// Which GPU a measured default belongs to, by its name (cudaDeviceProp::name): some defaults of
// the decode kernels won on an H100 and lost on an H200, or the other way round
// (docs/CUDA_NOTES.md: the L2 prefetch, session 41-42; the gated o GEMV's residency, session 57).
#include <string_view>

namespace ember::cuda {

inline bool gpu_is_h100(std::string_view gpu_name) { return gpu_name.find("H100") != std::string_view::npos; }

}  // namespace ember::cuda
