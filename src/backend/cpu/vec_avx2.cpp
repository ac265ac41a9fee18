// Vector helpers and activation quantizers compiled for avx2 (see vec_impl.inc). Reached
// only through the kernel table after the runtime CPU check.
#include "backend/cpu/kernels.h"

#include <immintrin.h>

#include <cstdint>

namespace ember::cpu {
namespace avx2 {
namespace {
#define EMBER_VNNI 0
#include "backend/cpu/simd_common.inc"
#include "backend/cpu/vec_impl.inc"
#undef EMBER_VNNI
}  // namespace
}  // namespace avx2

void register_avx2_vec(KernelTable& kt) { avx2::register_vec(kt); }

}  // namespace ember::cpu
