// Vector helpers and activation quantizers compiled for avx512 (see vec_impl.inc). Reached
// only through the kernel table after the runtime CPU check.
#include "backend/cpu/kernels.h"

#include <immintrin.h>

#include <cstdint>

// GCC 12's AVX-512 intrinsics build "undefined" vectors from self-initialized variables,
// which -Wmaybe-uninitialized reports inside the headers; the values are never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace ember::cpu {
namespace avx512 {
namespace {
#define EMBER_VNNI 1
#include "backend/cpu/simd_common.inc"
#include "backend/cpu/vec_impl.inc"
#undef EMBER_VNNI
}  // namespace
}  // namespace avx512

void register_avx512_vec(KernelTable& kt) { avx512::register_vec(kt); }

}  // namespace ember::cpu
