#pragma once
// The CPU backend: F32 activations, weights of any dtype used in place (memory-mapped),
// kernels threaded with a ThreadPool and chosen at construction by the CPU's instruction set.
#include "backend/backend.h"

#include <memory>
#include <string_view>

namespace ember {

// n_threads <= 0: one per hardware thread.
std::unique_ptr<Backend> make_cpu_backend(int n_threads);

// For tests and benchmarks: the same backend restricted to an instruction set
// ("scalar", "avx2", "avx512", "avx512vbmi"); null when the name is unknown or the CPU lacks it.
std::unique_ptr<Backend> make_cpu_backend_isa(int n_threads, std::string_view isa);

}  // namespace ember
