// Runtime dispatch: picks the best instruction set once, at backend construction, and builds
// the kernel table for it (scalar entries first, overridden by the SIMD files).
#include "backend/cpu/kernels.h"

#include <cstdlib>

namespace ember::cpu {

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vbmi: return "avx512vbmi";
  }
  return "unknown";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
#if defined(EMBER_CPU_X86)
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
    case Isa::Avx512:
      // The AVX-512 kernels use F/BW/VL/DQ and VNNI (vpdpbusd); BF16 is optional and
      // checked separately by the kernels that would use it.
      return isa_supported(Isa::Avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    case Isa::Avx512Vbmi: return isa_supported(Isa::Avx512) && __builtin_cpu_supports("avx512vbmi");
#else
    default: return false;
#endif
  }
  return false;
}

Isa detect_isa() {
  // EMBER_CPU_ISA=scalar|avx2|avx512|avx512vbmi caps the choice (debugging, and testing
  // every path on one machine); an unsupported request falls back to the best supported set.
  if (const char* want = std::getenv("EMBER_CPU_ISA")) {
    const std::string_view w(want);
    if (w == "scalar") return Isa::Scalar;
    if (w == "avx2" && isa_supported(Isa::Avx2)) return Isa::Avx2;
    if (w == "avx512" && isa_supported(Isa::Avx512)) return Isa::Avx512;
  }
  if (isa_supported(Isa::Avx512Vbmi)) return Isa::Avx512Vbmi;
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

int weight_kind_index(DType t) {
  switch (t) {
    case DType::F32: return static_cast<int>(WeightKind::F32);
    case DType::F16: return static_cast<int>(WeightKind::F16);
    case DType::BF16: return static_cast<int>(WeightKind::BF16);
    case DType::Q4_0: return static_cast<int>(WeightKind::Q4_0);
    case DType::Q4_1: return static_cast<int>(WeightKind::Q4_1);
    case DType::Q5_0: return static_cast<int>(WeightKind::Q5_0);
    case DType::Q5_1: return static_cast<int>(WeightKind::Q5_1);
    case DType::Q8_0: return static_cast<int>(WeightKind::Q8_0);
    case DType::Q2_K: return static_cast<int>(WeightKind::Q2_K);
    case DType::Q3_K: return static_cast<int>(WeightKind::Q3_K);
    case DType::Q4_K: return static_cast<int>(WeightKind::Q4_K);
    case DType::Q5_K: return static_cast<int>(WeightKind::Q5_K);
    case DType::Q6_K: return static_cast<int>(WeightKind::Q6_K);
    default: return -1;
  }
}

KernelTable make_kernel_table(Isa isa) {
  KernelTable kt;
  register_scalar_kernels(kt);
#if defined(EMBER_CPU_X86)
  if (isa >= Isa::Avx2) {
    register_avx2_vec(kt);
    register_avx2_matmul_quant(kt);
    register_avx2_matmul_float(kt);
  }
  if (isa >= Isa::Avx512) {
    register_avx512_vec(kt);
    register_avx512_matmul_quant(kt);
    register_avx512_matmul_float(kt);
  }
  if (isa >= Isa::Avx512Vbmi) register_avx512_vbmi_matmul(kt);
#endif
  for (int w = 0; w < static_cast<int>(WeightKind::Count); ++w) kt.matmul_stream[w] = kt.matmul[w];
#if defined(EMBER_CPU_X86)
  if (isa >= Isa::Avx512) {
    // One activation row against weights streamed from memory: the ymm row kernels with VNNI
    // beat the zmm ones for Q4_0/Q5_0/Q8_0 on this Zen 4 (they stream 5-17% more than the zmm
    // kernels, measured with the AVX2 builds of the same kernels; with the weights in huge
    // pages the VNNI ones decode Qwen2.5 Q4_0 at 61.6 vs 57.8 tok/s for the AVX2 ones, medians
    // of 5 alternated runs; Gemma Q4_0 and Qwen Q8_0 level). The zmm kernels stay for cached
    // and multi-row work.
    register_avx512_stream(kt);
  }
#endif
  kt.isa = isa;
  return kt;
}

}  // namespace ember::cpu
