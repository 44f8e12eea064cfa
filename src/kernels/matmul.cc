#include "kernels/matmul.h"

#include <algorithm>

namespace tandem::kernels {
namespace {

// Quantizes n_tokens rows of x into scratch in the activation format; returns the row stride.
size_t QuantizeActivations(const KernelTable& k, TensorType wtype, int64_t cols, const float* x,
                           int64_t n_tokens, Scratch& scratch) {
  const TensorType act = k.of(wtype).act_type;
  const size_t stride = quant::RowBytes(act, cols);
  const size_t need = stride * static_cast<size_t>(n_tokens);
  if (scratch.act.size() < need) scratch.act.resize(need);
  const quant::QuantizeRowFn q = k.quantize_act[static_cast<uint32_t>(act)];
  for (int64_t t = 0; t < n_tokens; ++t) q(x + t * cols, scratch.act.data() + t * stride, cols);
  return stride;
}

// Rows per work unit: a multiple of 4 keeps neighbouring threads off each other's cache lines.
constexpr int64_t kRowGranule = 16;

}  // namespace

void MatVec(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
            int64_t cols, const float* x, float* y, Scratch& scratch) {
  QuantizeActivations(k, wtype, cols, x, 1, scratch);
  const quant::VecDotFn dot = k.of(wtype).vec_dot;
  const size_t row_bytes = quant::RowBytes(wtype, cols);
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* a = scratch.act.data();
  pool.ParallelFor(rows, kRowGranule, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = dot(cols, wb + i * row_bytes, a);
  });
}

void MatMul(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
            int64_t cols, const float* x, int64_t n_tokens, float* y, int64_t y_stride,
            Scratch& scratch) {
  if (n_tokens == 1) {
    MatVec(k, pool, wtype, w, rows, cols, x, y, scratch);
    return;
  }
  const size_t a_stride = QuantizeActivations(k, wtype, cols, x, n_tokens, scratch);
  const VecDotMultiFn multi = k.of(wtype).vec_dot_multi;
  const size_t row_bytes = quant::RowBytes(wtype, cols);
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* a = scratch.act.data();
  // Tiles: a band of weight rows per thread; inside it, blocks of rows x token groups so that a
  // weight row stays in L1/L2 while every token group passes over it.
  constexpr int64_t kRowTile = 16;
  pool.Run([&](int t, int n) {
    const Range r = SplitRange(rows, t, n, kRowGranule);
    float out[kMaxMultiRows];
    for (int64_t r0 = r.begin; r0 < r.end; r0 += kRowTile) {
      const int64_t r1 = std::min(r.end, r0 + kRowTile);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxMultiRows) {
        const int na = static_cast<int>(std::min<int64_t>(kMaxMultiRows, n_tokens - t0));
        for (int64_t i = r0; i < r1; ++i) {
          multi(cols, wb + i * row_bytes, a + t0 * a_stride, a_stride, na, out);
          for (int j = 0; j < na; ++j) y[(t0 + j) * y_stride + i] = out[j];
        }
      }
    }
  });
}

}  // namespace tandem::kernels
