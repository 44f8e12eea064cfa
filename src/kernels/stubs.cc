// Has*() = false stand-ins for ISA files this build does not compile (see CMakeLists.txt).
#include "kernels/internal.h"

namespace tandem::kernels::internal {

#ifndef TANDEM_HAVE_AVX2
bool HasAvx2() { return false; }
void FillAvx2(KernelTable*) {}
#endif
#ifndef TANDEM_HAVE_AVX512
bool HasAvx512() { return false; }
void FillAvx512(KernelTable*) {}
#endif
#ifndef TANDEM_HAVE_AMX
bool HasAmx() { return false; }
void FillAmx(KernelTable*) {}
#endif
#ifndef TANDEM_HAVE_NEON
bool HasNeon() { return false; }
void FillNeon(KernelTable*) {}
#endif
#ifndef TANDEM_HAVE_NEONDOT
bool HasNeonDot() { return false; }
void FillNeonDot(KernelTable*) {}
#endif

}  // namespace tandem::kernels::internal
