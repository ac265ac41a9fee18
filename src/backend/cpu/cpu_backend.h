#pragma once
// The CPU backend: F32 activations, weights of any dtype used in place (memory-mapped),
// kernels threaded with a ThreadPool and chosen at construction by the CPU's instruction set.
//
// Layout of cpu/: kernels.h (the per-ISA KernelTable), dispatch.cpp (runtime CPU check:
// scalar < avx2 < avx512 (F/BW/VL/DQ/VNNI) < avx512vbmi), one file per op family
// (matmul.cpp driver, matmul_gemm.cpp panel GEMM, attention.cpp, kv_store.cpp,
// norm_rope.cpp, elementwise.cpp, get_rows.cpp) and the kernels: *_scalar.cpp (portable),
// *_avx2.cpp / *_avx512.cpp / *_vbmi.cpp (own target flags) sharing *.inc bodies.
// Quantized matmuls run in the integer domain on activations quantized once per call
// (Q8_0 semantics for 32-blocks, Q8_K for k-quants), see kernels.h for the layouts.
#include "backend/backend.h"

#include <memory>
#include <string_view>

namespace ember {

// n_threads <= 0: one per hardware thread. batch_invariant: every row's result is
// independent of the other rows of its batch (one matmul kernel family for any row count,
// attention with a fixed key-tile grid and no batch-dependent splits), at a cost in prefill
// and long-context decode speed; by default the fastest kernel for each shape runs.
std::unique_ptr<Backend> make_cpu_backend(int n_threads, bool batch_invariant = false);

namespace cpu {
class CpuRankGroup;
}
// Rank `rank` of an in-process tensor-parallel group (cpu_rank_group.h): the backend's
// all_reduce_sum meets the group's other ranks, each driven by its own thread.
std::unique_ptr<Backend> make_cpu_backend(int n_threads, bool batch_invariant,
                                          std::shared_ptr<cpu::CpuRankGroup> group, int rank);

// For tests and benchmarks: the same backend restricted to an instruction set
// ("scalar", "avx2", "avx512", "avx512vbmi"); null when the name is unknown or the CPU lacks it.
std::unique_ptr<Backend> make_cpu_backend_isa(int n_threads, std::string_view isa);

}  // namespace ember
