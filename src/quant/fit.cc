#include "quant/fit.h"

#include <cmath>

namespace tandem::quant::internal {
namespace {

// Candidate scales are (nmax + kStep*k) / range for k in [-kSteps, kSteps]; k = 0 is min/max.
constexpr int kSteps = 6;
constexpr float kStep = 0.12f;

}  // namespace

float FitSymmetric(const float* x, int n, int nmax, int8_t* q) {
  float vmax = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  }
  if (amax == 0) {
    for (int i = 0; i < n; ++i) q[i] = 0;
    return 0;
  }
  float best_score = -1, best_d = -vmax / static_cast<float>(nmax);
  // Candidates: the extreme element mapped to -nmax (min/max) first, then to -nmax +- kStep*k, then
  // exactly to the levels -(nmax-1) and nmax-1 (so that any block this function produces is found
  // again from its own dequantized values).
  for (int step = 0; step <= 2 * kSteps + 2; ++step) {
    const int k = (step + 1) / 2 * (step % 2 ? 1 : -1);  // 0, +1, -1, +2, -2, ...
    float level = -(static_cast<float>(nmax) + kStep * k);
    if (step == 2 * kSteps + 1) level = -static_cast<float>(nmax - 1);
    if (step == 2 * kSteps + 2) level = static_cast<float>(nmax - 1);
    if (level == 0) continue;
    const float iscale = level / vmax;
    float sxq = 0, sqq = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(RoundToInt(iscale * x[i]), -nmax, nmax - 1);
      sxq += x[i] * static_cast<float>(l);
      sqq += static_cast<float>(l * l);
    }
    if (sqq == 0) continue;
    // Least-squares d for these q; the error is sum(x^2) - sxq^2/sqq, so maximise sxq^2/sqq.
    const float score = sxq * sxq / sqq;
    if (score > best_score) {
      best_score = score;
      best_d = sxq / sqq;
    }
  }
  // The final q are those nearest to x / d for the chosen d, which can only lower the error.
  const float id = 1 / best_d;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<int8_t>(Clamp(RoundToInt(x[i] * id), -nmax, nmax - 1));
  }
  return best_d;
}

void FitAffine(const float* x, int n, int nmax, bool min_le_zero, float* d_out, float* m_out,
               uint8_t* q) {
  float lo = x[0], hi = x[0], sx = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::fmin(lo, x[i]);
    hi = std::fmax(hi, x[i]);
    sx += x[i];
    sxx += x[i] * x[i];
  }
  if (min_le_zero) lo = std::fmin(lo, 0.0f);
  if (hi == lo) {
    for (int i = 0; i < n; ++i) q[i] = 0;
    *d_out = 0;
    *m_out = lo;
    return;
  }
  const float fn = static_cast<float>(n);
  float best_err = INFINITY, best_d = (hi - lo) / static_cast<float>(nmax), best_m = lo;
  for (int step = 0; step <= 2 * kSteps; ++step) {
    const int k = (step + 1) / 2 * (step % 2 ? 1 : -1);
    const float iscale = (static_cast<float>(nmax) + kStep * k) / (hi - lo);
    float sq = 0, sqq = 0, sxq = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(RoundToInt(iscale * (x[i] - lo)), 0, nmax);
      sq += static_cast<float>(l);
      sqq += static_cast<float>(l * l);
      sxq += x[i] * static_cast<float>(l);
    }
    // Least squares for x ~ d*q + m over these q.
    float d, m;
    const float det = fn * sqq - sq * sq;
    if (det <= 0) continue;  // all q equal
    d = (fn * sxq - sq * sx) / det;
    m = (sqq * sx - sq * sxq) / det;
    if (min_le_zero && m > 0) {
      m = 0;
      d = sxq / sqq;
    }
    if (d < 0) continue;
    // sum (d q + m - x)^2 expanded over the sums.
    const float err = d * d * sqq + 2 * d * m * sq + fn * m * m - 2 * d * sxq - 2 * m * sx + sxx;
    if (err < best_err) {
      best_err = err;
      best_d = d;
      best_m = m;
    }
  }
  // The final q are those that best fit the chosen (d, m), which can only lower the error.
  const float id = best_d > 0 ? 1 / best_d : 0;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<uint8_t>(Clamp(RoundToInt((x[i] - best_m) * id), 0, nmax));
  }
  *d_out = best_d;
  *m_out = best_m;
}

}  // namespace tandem::quant::internal
