// Quantized matmul kernels compiled for avx2 (see matmul_quant_impl.inc). Reached only
// through the kernel table after the runtime CPU check.
#include "backend/cpu/kernels.h"
#include "quant/blocks.h"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace ember::cpu {
namespace avx2 {
namespace {
#define EMBER_VNNI 0
#include "backend/cpu/simd_common.inc"
#include "backend/cpu/matmul_quant_impl.inc"
#include "backend/cpu/matmul_gemm_decode.inc"
#include "backend/cpu/matmul_gemm_avx2.inc"
#undef EMBER_VNNI
}  // namespace
}  // namespace avx2

void register_avx2_matmul_quant(KernelTable& kt) {
  avx2::register_quant_matmul(kt);
  avx2::register_gemm(kt);
}

}  // namespace ember::cpu
