#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/interleave.h"

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

namespace tandem::kernels {
namespace {

// A batch of products of different types, sizes and inputs (some sharing an input), some in the
// interleaved layout, gives each job exactly what MatVec (interleaved: MatMulInterleaved) gives it
// alone, on every table and thread count. An interleaved job right after a row-major one of the
// same input and type must not reuse its activations (Q8S is not Q8_0; an interleaved Q4_K's Q8_K
// rows carry sub-block sums a row dot's do not), nor a job of the same input and format but a
// longer row, and one after a job whose rows are not a multiple of 16 must still get whole groups.
TEST(MatMulTest, MatVecBatchEqualsOneMatVecPerJob) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> d;
  struct Spec {
    TensorType type;
    int64_t rows, cols;
    int input;  // jobs with the same input share x
    bool interleaved = false;
  };
  const std::vector<Spec> specs = {{TensorType::kQ4_K, 40, 512, 0}, {TensorType::kQ4_K, 33, 512, 0},
                                   {TensorType::kQ4_K, 16, 512, 0, true},  {TensorType::kQ6_K, 7, 256, 1},  {TensorType::kQ8_0, 64, 512, 2},
                                   {TensorType::kF16, 5, 64, 3},    {TensorType::kQ4_0, 19, 512, 2},
                                   {TensorType::kQ4_0, 48, 512, 2, true}, {TensorType::kQ4_K, 32, 512, 0, true},
                                   {TensorType::kQ4_K, 16, 512, 0, true}, {TensorType::kQ6_K, 9, 256, 1},
                                   {TensorType::kQ6_K, 32, 256, 1, true}, {TensorType::kQ6_K, 32, 512, 1, true}};
  std::vector<std::vector<uint8_t>> weights;
  std::vector<std::vector<float>> inputs(4);
  for (auto& x : inputs) {
    x.resize(512);
    for (float& v : x) v = d(rng);
  }
  for (const Spec& s : specs) {
    std::vector<float> wf(s.rows * s.cols);
    for (float& v : wf) v = d(rng);
    const size_t rb = quant::RowBytes(s.type, s.cols);
    weights.emplace_back(rb * s.rows);
    for (int64_t r = 0; r < s.rows; ++r) {
      quant::ReferenceOps(s.type)->quantize_row(wf.data() + r * s.cols, weights.back().data() + r * rb, s.cols);
    }
    if (s.interleaved) {
      std::vector<uint8_t> il(weights.back().size());
      Interleave(s.type, weights.back().data(), il.data(), s.rows, s.cols);
      weights.back() = std::move(il);
    }
  }
  int interleaved_jobs = 0;
  for (const KernelTable* k : Available()) {
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      Scratch scratch;
      std::vector<std::vector<float>> got(specs.size()), want(specs.size());
      std::vector<MatVecJob> jobs;
      for (size_t j = 0; j < specs.size(); ++j) {
        const Spec& s = specs[j];
        if (s.interleaved && k->gemm_interleaved[static_cast<uint32_t>(s.type)] == nullptr) continue;
        want[j].resize(s.rows);
        got[j].assign(s.rows, NAN);
        const float* x = inputs[s.input].data();
        if (s.interleaved) {
          MatMulInterleaved(*k, pool, s.type, weights[j].data(), s.rows, s.cols, x, 1, want[j].data(), s.rows, scratch);
          ++interleaved_jobs;
        } else {
          MatVec(*k, pool, s.type, weights[j].data(), s.rows, s.cols, x, want[j].data(), scratch);
        }
        jobs.push_back({s.type, weights[j].data(), s.rows, s.cols, x, got[j].data(), s.interleaved});
      }
      MatVecBatch(*k, pool, jobs, scratch);
      for (size_t j = 0; j < specs.size(); ++j) {
        EXPECT_EQ(got[j], want[j]) << IsaName(k->isa) << " threads " << threads << " job " << j;
      }
    }
  }
  if (Cpu().avx512vnni) {
    EXPECT_GT(interleaved_jobs, 0) << "no interleaved kernel on a CPU with AVX-512 VNNI";
  }
}

// Products of interleaved weights taking the same input in one pass (a layer's q, k, v; its gate
// and up) give each job exactly what MatMulInterleaved gives it alone: K-quants of two types
// sharing one quantization, a batch whose formats differ (Q4_0's Q8S and Q4_K's Q8_K: each job
// alone), few tokens and enough to quantize over the threads, every table and thread count.
TEST(MatMulTest, SameInputProductsEqualOneMatMulInterleavedEach) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> d;
  const int64_t cols = 1024;
  struct Spec {
    TensorType type;
    int64_t rows;
  };
  const std::vector<std::vector<Spec>> batches = {
      {{TensorType::kQ4_K, 64}, {TensorType::kQ4_K, 16}, {TensorType::kQ6_K, 32}},
      {{TensorType::kQ4_0, 32}, {TensorType::kQ4_K, 48}},
      {{TensorType::kQ8_0, 16}, {TensorType::kQ4_0, 32}}};
  int batches_run = 0;
  for (const std::vector<Spec>& batch : batches) {
    std::vector<std::vector<uint8_t>> weights;
    for (const Spec& s : batch) {
      std::vector<float> wf(s.rows * cols);
      for (float& v : wf) v = d(rng);
      const size_t rb = quant::RowBytes(s.type, cols);
      std::vector<uint8_t> rowmajor(rb * s.rows);
      for (int64_t r = 0; r < s.rows; ++r) {
        quant::ReferenceOps(s.type)->quantize_row(wf.data() + r * cols, rowmajor.data() + r * rb, cols);
      }
      weights.emplace_back(rowmajor.size());
      Interleave(s.type, rowmajor.data(), weights.back().data(), s.rows, cols);
    }
    for (const int64_t nt : {int64_t{8}, int64_t{40}}) {  // 40 x 1024: quantized over the threads
      std::vector<float> x(nt * cols);
      for (float& v : x) v = d(rng);
      for (const KernelTable* k : Available()) {
        const bool all = std::all_of(batch.begin(), batch.end(), [&](const Spec& s) {
          return k->gemm_interleaved[static_cast<uint32_t>(s.type)] != nullptr;
        });
        if (!all) continue;
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          Scratch scratch;
          std::vector<std::vector<float>> got(batch.size()), want(batch.size());
          std::vector<GemmJob> jobs;
          for (size_t j = 0; j < batch.size(); ++j) {
            const int64_t stride = batch[j].rows + 3;
            want[j].assign(nt * stride, -1.0f);
            got[j].assign(nt * stride, -1.0f);
            MatMulInterleaved(*k, pool, batch[j].type, weights[j].data(), batch[j].rows, cols, x.data(), nt,
                              want[j].data(), stride, scratch);
            jobs.push_back({batch[j].type, weights[j].data(), batch[j].rows, got[j].data(), stride});
          }
          MatMulInterleavedSameInput(*k, pool, jobs, cols, x.data(), nt, scratch);
          for (size_t j = 0; j < batch.size(); ++j) {
            EXPECT_EQ(got[j], want[j]) << IsaName(k->isa) << " threads " << threads << " tokens " << nt << " job " << j;
          }
          ++batches_run;
        }
      }
    }
  }
  if (Cpu().avx512vnni) {
    EXPECT_GT(batches_run, 0) << "no interleaved kernel on a CPU with AVX-512 VNNI";
  } else if (batches_run == 0) {
    GTEST_SKIP() << "this CPU has no interleaved kernels (they need AVX-512 VNNI)";
  }
}


// A rows x cols matrix of random weights (normal, times `scale`) quantized by the reference and
// put in the interleaved layout.
std::vector<uint8_t> RandomInterleaved(TensorType type, int64_t rows, int64_t cols, float scale, std::mt19937_64& rng) {
  std::normal_distribution<float> d;
  std::vector<float> wf(rows * cols);
  for (float& v : wf) v = scale * d(rng);
  const size_t rb = quant::RowBytes(type, cols);
  std::vector<uint8_t> rowmajor(rb * rows), il(rb * rows);
  for (int64_t r = 0; r < rows; ++r) quant::ReferenceOps(type)->quantize_row(wf.data() + r * cols, rowmajor.data() + r * rb, cols);
  Interleave(type, rowmajor.data(), il.data(), rows, cols);
  return il;
}

// The end of a test over the interleaved tables: on a CPU with AVX-512 VNNI something must have
// been checked; elsewhere there may be no such kernels, and the test says so.
void RequireChecked(int checked) {
  if (Cpu().avx512vnni) {
    EXPECT_GT(checked, 0) << "nothing checked on a CPU with AVX-512 VNNI";
  } else if (checked == 0) {
    GTEST_SKIP() << "this CPU has no interleaved kernels (they need AVX-512 VNNI)";
  }
}

// The SiLU-gated pair in one pass gives the bits of the two products (MatMulInterleavedSameInput)
// and k.f.silu_mul over each token's row, for small batches on every table that takes them, with
// gate and up of one type or of two that share Q8_K activations, into rows wider than the matrix
// (their padding untouched); pairs whose activations differ, one token and more than a kernel
// call's rows are not taken.
TEST(MatMulTest, SiluMulInOnePassEqualsProductsThenSiluMul) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> d;
  const int64_t rows = 208, cols = 512, stride = rows + 3;  // 13 groups: a block of 8 and one of 5
  constexpr float kPad = -3.25f;
  const std::pair<TensorType, TensorType> pairs[] = {{TensorType::kQ4_K, TensorType::kQ4_K},
                                                     {TensorType::kQ4_K, TensorType::kQ6_K},
                                                     {TensorType::kQ4_0, TensorType::kQ4_0},
                                                     {TensorType::kQ8_0, TensorType::kQ8_0}};
  int checked = 0;
  for (const auto& [tg, tu] : pairs) {
    const std::vector<uint8_t> wg = RandomInterleaved(tg, rows, cols, 0.5f, rng), wu = RandomInterleaved(tu, rows, cols, 0.5f, rng);
    for (const KernelTable* k : Available()) {
      if (!SiluMulFusable(*k, tg, tu, cols, 2)) continue;
      EXPECT_FALSE(SiluMulFusable(*k, tg, tu, cols, 1));
      EXPECT_FALSE(SiluMulFusable(*k, tg, tu, cols, 17));
      for (int64_t nt : {int64_t{2}, int64_t{5}, int64_t{8}, int64_t{13}, int64_t{16}}) {
        ASSERT_TRUE(SiluMulFusable(*k, tg, tu, cols, nt));
        std::vector<float> x(nt * cols);
        for (float& v : x) v = d(rng);
        for (int threads : {1, 2}) {
          SCOPED_TRACE(std::string(IsaName(k->isa)) + " " + std::string(gguf::TensorTypeName(tg)) + "/" +
                       std::string(gguf::TensorTypeName(tu)) + " tokens " + std::to_string(nt) + " threads " +
                       std::to_string(threads));
          ThreadPool pool(threads);
          Scratch scratch;
          std::vector<float> gate(nt * rows), up(nt * rows), want(nt * stride, kPad), got(nt * stride, kPad);
          const GemmJob jobs[] = {{tg, wg.data(), rows, gate.data(), rows}, {tu, wu.data(), rows, up.data(), rows}};
          MatMulInterleavedSameInput(*k, pool, jobs, cols, x.data(), nt, scratch);
          for (int64_t t = 0; t < nt; ++t) k->f.silu_mul(&gate[t * rows], &up[t * rows], &want[t * stride], rows);
          MatMulInterleavedSiluMul(*k, pool, jobs[0], jobs[1], cols, x.data(), nt, got.data(), stride, scratch);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
          for (int64_t t = 0; t < nt; ++t) EXPECT_EQ(got[t * stride + rows], kPad);
          ++checked;
        }
      }
    }
  }
  for (const KernelTable* k : Available()) {  // Q4_0's activations (Q8S) are not Q4_K's (Q8_K)
    EXPECT_FALSE(SiluMulFusable(*k, TensorType::kQ4_0, TensorType::kQ4_K, cols, 4));
  }
  RequireChecked(checked);
}


// The gated rows quantized as they are made (MatMulInterleavedSiluMulActs) are the bytes the down
// matrix's own quantization makes of MatMulInterleavedSiluMul's rows, and its product from them
// (MatMulInterleavedActs) the bits of MatMulInterleaved over those rows: 768 gated values (three
// super-blocks, split unevenly over 2 threads), down matrices of Q4_K and Q6_K. Gated rows that are
// not whole super-blocks and a down matrix whose activations are not Q8_K are not taken.
TEST(MatMulTest, GatedRowsQuantizedAsTheyAreMadeEqualTheDownMatrixsOwn) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> d;
  const int64_t cols = 512, rows = 768, down_rows = 64;
  const std::vector<uint8_t> wg = RandomInterleaved(TensorType::kQ4_K, rows, cols, 0.5f, rng);
  const std::vector<uint8_t> wu = RandomInterleaved(TensorType::kQ4_K, rows, cols, 0.5f, rng);
  int checked = 0;
  for (TensorType down_type : {TensorType::kQ4_K, TensorType::kQ6_K}) {
    const std::vector<uint8_t> wd = RandomInterleaved(down_type, down_rows, rows, 0.5f, rng);
    for (const KernelTable* k : Available()) {
      if (!SiluMulActsFusable(*k, TensorType::kQ4_K, TensorType::kQ4_K, down_type, cols, rows, 2)) continue;
      EXPECT_FALSE(SiluMulActsFusable(*k, TensorType::kQ4_K, TensorType::kQ4_K, down_type, cols, rows - 16, 2));
      EXPECT_FALSE(SiluMulActsFusable(*k, TensorType::kQ4_K, TensorType::kQ4_K, TensorType::kQ4_0, cols, rows, 2));
      for (int64_t nt : {int64_t{3}, int64_t{8}}) {
        std::vector<float> x(nt * cols);
        for (float& v : x) v = d(rng);
        for (int threads : {1, 2}) {
          SCOPED_TRACE(std::string(IsaName(k->isa)) + " down " + std::string(gguf::TensorTypeName(down_type)) +
                       " tokens " + std::to_string(nt) + " threads " + std::to_string(threads));
          ThreadPool pool(threads);
          Scratch scratch;
          const GemmJob gate{TensorType::kQ4_K, wg.data(), rows}, up{TensorType::kQ4_K, wu.data(), rows};
          std::vector<float> gated(nt * rows), want(nt * down_rows), got(nt * down_rows, -1.0f);
          MatMulInterleavedSiluMul(*k, pool, gate, up, cols, x.data(), nt, gated.data(), rows, scratch);
          MatMulInterleaved(*k, pool, down_type, wd.data(), down_rows, rows, gated.data(), nt, want.data(), down_rows, scratch);
          const std::vector<uint8_t> want_act(scratch.act.begin(), scratch.act.begin() + nt * InterleavedActRowBytes(down_type, rows));
          std::vector<uint8_t> act;
          const size_t stride = MatMulInterleavedSiluMulActs(*k, pool, gate, up, down_type, cols, x.data(), nt, act, scratch);
          ASSERT_EQ(stride, InterleavedActRowBytes(down_type, rows));
          ASSERT_EQ(0, std::memcmp(act.data(), want_act.data(), want_act.size()));
          MatMulInterleavedActs(*k, pool, down_type, wd.data(), down_rows, rows, act.data(), stride, nt, got.data(), down_rows);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
          ++checked;
        }
      }
    }
  }
  RequireChecked(checked);
}


// MatMulInterleavedAdd adds each product to y's value with the bits of MatMulInterleaved then
// k.f.add, for small batches of Q4_K and Q6_K (the down matrices of Q4_K_M) and Q4_0, into rows
// wider than the matrix whose padding stays as it was.
TEST(MatMulTest, ProductsAddedAsTheyAreMadeEqualProductsThenAdd) {
  std::mt19937_64 rng(13);
  std::normal_distribution<float> d;
  const int64_t rows = 208, cols = 512, stride = rows + 4;
  int checked = 0;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ4_0}) {
    const std::vector<uint8_t> w = RandomInterleaved(type, rows, cols, 1.0f, rng);
    for (const KernelTable* k : Available()) {
      if (k->gemm_interleaved[static_cast<uint32_t>(type)] == nullptr) continue;
      EXPECT_FALSE(SmallBatch(1));
      EXPECT_FALSE(SmallBatch(17));
      for (int64_t nt : {int64_t{2}, int64_t{7}, int64_t{9}, int64_t{16}}) {
        ASSERT_TRUE(SmallBatch(nt));
        SCOPED_TRACE(std::string(IsaName(k->isa)) + " " + std::string(gguf::TensorTypeName(type)) + " tokens " + std::to_string(nt));
        std::vector<float> x(nt * cols), base(nt * stride);
        for (float& v : x) v = d(rng);
        for (float& v : base) v = d(rng);
        ThreadPool pool(2);
        Scratch scratch;
        std::vector<float> prod(nt * rows), want = base, got = base;
        MatMulInterleaved(*k, pool, type, w.data(), rows, cols, x.data(), nt, prod.data(), rows, scratch);
        for (int64_t t = 0; t < nt; ++t) k->f.add(&want[t * stride], &prod[t * rows], &want[t * stride], rows);
        MatMulInterleavedAdd(*k, pool, type, w.data(), rows, cols, x.data(), nt, got.data(), stride, scratch);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
        ++checked;
      }
    }
  }
  RequireChecked(checked);
}

}  // namespace
}  // namespace tandem::kernels
