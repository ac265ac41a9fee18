// Quantized matmul kernels that need AVX-512 VBMI (vpermt2b), compiled for avx512 + vbmi (see matmul_quant_impl.inc). Reached only
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
namespace avx512vbmi {
namespace {
#define EMBER_VNNI 1
#define EMBER_VBMI 1
#include "backend/cpu/simd_common.inc"
#include "backend/cpu/matmul_quant_impl.inc"
#include "backend/cpu/matmul_b32_avx512.inc"
#undef EMBER_VNNI
#undef EMBER_VBMI
}  // namespace
}  // namespace avx512vbmi

void register_avx512_vbmi_matmul(KernelTable& kt) {
  using namespace avx512vbmi;
  kt.matmul[static_cast<int>(WeightKind::Q4_0)] = MatmulKernel{ActFormat::Q8_32P, matmul_b32_p<Z4_0V, FQ4_0>};
}

}  // namespace ember::cpu
