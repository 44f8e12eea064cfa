// The AVX2 + FMA + F16C kernel table (integer dots with maddubs/madd). Kernels: x86_common.h,
// x86_attention.h.
#include "kernels/x86_common.h"
#include "kernels/x86_attention.h"

namespace tandem::kernels::internal {

bool HasAvx2() { return true; }

void FillAvx2(KernelTable* t) {
  t->isa = Isa::kAvx2;
  x86::FillCommon(t);
  x86::FillAttention(t);
}

}  // namespace tandem::kernels::internal
