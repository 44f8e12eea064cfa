// Scale search shared by the reference quantizers (internal to src/quant).
//
// A block of n floats is approximated either symmetrically, x ~ d*q with integer q in
// [-nmax, nmax-1], or affinely, x ~ d*q + m with q in [0, nmax]. Plain min/max scaling wastes
// levels on outliers, so both fits try a small set of candidate scales around the min/max one,
// refit (d, m) by least squares for each candidate's q, and keep the candidate with the smallest
// squared error. The min/max candidate is tried first and only a strictly better one replaces it;
// the symmetric fit also tries the scales that put the extreme element exactly on the levels
// +-(nmax-1). So data that one of its blocks reproduces exactly is given back that block.
//
// Thread safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>

namespace tandem::quant::internal {

// Round to nearest, ties to even (the default floating-point environment).
inline int RoundToInt(float x) {
  return static_cast<int>(std::lrint(x));
}

inline int Clamp(int v, int lo, int hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// Symmetric fit. Returns d (may be negative: the element of largest magnitude maps to -nmax) and
// writes q[i] in [-nmax, nmax-1]. All-zero input gives d = 0 and q = 0.
// REQUIRES: 0 < n <= 256, nmax >= 1.
float FitSymmetric(const float* x, int n, int nmax, int8_t* q);

// Affine fit. Writes *d >= 0, *m and q[i] in [0, nmax]. If `min_le_zero`, m is forced <= 0 (the
// K formats store -m as an unsigned value). REQUIRES: 0 < n <= 256, nmax >= 1.
void FitAffine(const float* x, int n, int nmax, bool min_le_zero, float* d, float* m, uint8_t* q);

}  // namespace tandem::quant::internal
