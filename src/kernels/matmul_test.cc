#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace tandem::kernels {
namespace {

// MatVec and MatMul equal the row-by-row reference dot on every table, for any thread count
// and for token counts that do and do not fill the multi-row groups.
TEST(MatMulTest, MatchesRowByRowDots) {
  const int64_t rows = 77, cols = 512;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> d;
  for (TensorType type : {TensorType::kF16, TensorType::kQ8_0, TensorType::kQ4_K,
                          TensorType::kQ6_K, TensorType::kQ4_0}) {
    std::vector<float> wf(rows * cols);
    for (float& v : wf) v = d(rng);
    const size_t rb = quant::RowBytes(type, cols);
    std::vector<uint8_t> w(rb * rows);
    for (int64_t r = 0; r < rows; ++r) {
      quant::ReferenceOps(type)->quantize_row(wf.data() + r * cols, w.data() + r * rb, cols);
    }
    for (int64_t nt : {1, 3, 8, 13}) {
      std::vector<float> x(nt * cols);
      for (float& v : x) v = d(rng);
      // Reference: scalar quantization of each token, scalar dot per row.
      const KernelTable& ref = *ForIsa(Isa::kScalar);
      const TensorType act = ref.of(type).act_type;
      std::vector<uint8_t> a(quant::RowBytes(act, cols));
      std::vector<float> want(nt * rows);
      for (int64_t t = 0; t < nt; ++t) {
        ref.quantize_act[static_cast<uint32_t>(act)](x.data() + t * cols, a.data(), cols);
        for (int64_t r = 0; r < rows; ++r) {
          want[t * rows + r] = ref.of(type).vec_dot(cols, w.data() + r * rb, a.data());
        }
      }
      for (const KernelTable* k : Available()) {
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          Scratch scratch;
          std::vector<float> got(nt * rows, NAN);
          MatMul(*k, pool, type, w.data(), rows, cols, x.data(), nt, got.data(), rows, scratch);
          for (int64_t i = 0; i < nt * rows; ++i) {
            ASSERT_NEAR(got[i], want[i], 2e-3 * (1 + std::fabs(want[i])))
                << IsaName(k->isa) << "/" << gguf::TensorTypeName(type) << " nt=" << nt
                << " threads=" << threads << " i=" << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem::kernels
