// F32 / F16 / BF16 weight matmul kernels compiled for avx512 (see matmul_float_impl.inc).
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
#include "backend/cpu/matmul_float_impl.inc"
#undef EMBER_VNNI
}  // namespace
}  // namespace avx512

void register_avx512_matmul_float(KernelTable& kt) { avx512::register_float_matmul(kt); }

}  // namespace ember::cpu
