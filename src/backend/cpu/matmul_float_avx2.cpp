// F32 / F16 / BF16 weight matmul kernels compiled for avx2 (see matmul_float_impl.inc).
#include "backend/cpu/kernels.h"

#include <immintrin.h>

#include <cstdint>

namespace ember::cpu {
namespace avx2 {
namespace {
#define EMBER_VNNI 0
#include "backend/cpu/simd_common.inc"
#include "backend/cpu/matmul_float_impl.inc"
#undef EMBER_VNNI
}  // namespace
}  // namespace avx2

void register_avx2_matmul_float(KernelTable& kt) { avx2::register_float_matmul(kt); }

}  // namespace ember::cpu
