// The AVX-512 kernel table: the x86 kernels compiled with AVX-512 VL + VNNI, so that integer dot
// products use VPDPBUSD / VPDPWSSD (multiply, widen and accumulate in one instruction). Kernels:
// x86_common.h, x86_attention.h.
#define TANDEM_X86_VNNI 1
#include "kernels/x86_common.h"
#include "kernels/x86_attention.h"

namespace tandem::kernels::internal {

bool HasAvx512() { return true; }

void FillAvx512(KernelTable* t) {
  t->isa = Isa::kAvx512;
  x86::FillCommon(t);
  x86::FillAttention(t);
}

}  // namespace tandem::kernels::internal
