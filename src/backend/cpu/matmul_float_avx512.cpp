// F32 / F16 / BF16 weight matmul kernels compiled for avx512.
#include "backend/cpu/kernels.h"

#include <immintrin.h>

#include <cstdint>

namespace ember::cpu {

void register_avx512_matmul_float(KernelTable& kt) { (void)kt; }

}  // namespace ember::cpu
