// avx512 vector helpers. Compiled with avx512 target flags; only reached after the runtime check.
#include "backend/cpu/kernels.h"

namespace ember::cpu {

void register_avx512_kernels(KernelTable& kt) { (void)kt; }

}  // namespace ember::cpu
