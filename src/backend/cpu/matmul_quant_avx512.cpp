// Quantized matmul kernels compiled for avx512 (see matmul_quant_impl.inc). Reached only
// through the kernel table after the runtime CPU check.
#include "backend/cpu/kernels.h"
#include "quant/blocks.h"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

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
#define EMBER_VBMI 0
#include "backend/cpu/simd_common.inc"
#include "backend/cpu/matmul_quant_impl.inc"
#include "backend/cpu/matmul_gemm_decode.inc"
#include "backend/cpu/matmul_gemm_avx512.inc"
#include "backend/cpu/matmul_b32_avx512.inc"
#undef EMBER_VNNI
#undef EMBER_VBMI
}  // namespace
}  // namespace avx512

void register_avx512_stream(KernelTable& kt) {
  KernelTable ymm;
  avx512::register_quant_matmul(ymm);
  for (WeightKind w : {WeightKind::Q4_0, WeightKind::Q5_0, WeightKind::Q8_0})
    kt.matmul_stream[static_cast<int>(w)] = ymm.matmul[static_cast<int>(w)];
}

void register_avx512_matmul_quant(KernelTable& kt) {
  avx512::register_quant_matmul(kt);
  avx512::register_b32_zmm(kt);
  avx512::register_gemm(kt);
}

}  // namespace ember::cpu
