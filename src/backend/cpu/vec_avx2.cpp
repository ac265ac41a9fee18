// avx2 vector helpers. Compiled with avx2 target flags; only reached after the runtime check.
#include "backend/cpu/kernels.h"

namespace ember::cpu {

void register_avx2_kernels(KernelTable& kt) { (void)kt; }

}  // namespace ember::cpu
