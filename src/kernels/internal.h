// Internal to src/kernels: how ISA files plug into the tables.
#pragma once

#include "kernels/kernels.h"

namespace tandem::kernels::internal {

// Builds the always-present scalar table from the quant reference.
void FillScalar(KernelTable* t);

// Each ISA file overrides what it implements in a copy of the scalar table. They are defined
// only when the build compiles that file (see CMakeLists.txt); Has*() says whether it did.
bool HasAvx2();
void FillAvx2(KernelTable* t);
bool HasAvx512();
void FillAvx512(KernelTable* t);
bool HasAmx();
void FillAmx(KernelTable* t);  // over a copy of the AVX-512 table
bool HasNeon();
void FillNeon(KernelTable* t);
bool HasNeonDot();
void FillNeonDot(KernelTable* t);

// A generic multi-row dot built on a single-row dot (for types without a dedicated one).
template <quant::VecDotFn kDot>
void MultiFromSingle(int64_t n, const void* w, const void* a, size_t a_stride, int na,
                     float* out) {
  for (int j = 0; j < na; ++j) {
    out[j] = kDot(n, w, static_cast<const uint8_t*>(a) + j * a_stride);
  }
}

}  // namespace tandem::kernels::internal
