// The NEON table with the ARMv8.2 dot-product extension (SDOT, vdotq_s32); compiled with
// -march=armv8.2-a+dotprod and chosen when the CPU reports it (HWCAP_ASIMDDP; every Apple
// Silicon core). The integer dot kernels are those of kernels_neon.cc, compiled again here with
// Dot16 done by SDOT (4 products per 32-bit lane in one instruction instead of a widening multiply
// and a pairwise accumulate per 8); the table starts as a copy of the NEON table, so the float
// kernels and quantizers stay the NEON ones.
#define TANDEM_NEON_SDOT 1
#include "kernels/kernels_neon.cc"
