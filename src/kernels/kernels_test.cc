// Every kernel of every table this CPU runs, against the scalar reference, on random data.
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace tandem::kernels {
namespace {

const TensorType kWeightTypes[] = {
    TensorType::kF32,  TensorType::kF16,  TensorType::kBF16, TensorType::kQ4_0, TensorType::kQ4_1,
    TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ8_0, TensorType::kQ2_K, TensorType::kQ3_K,
    TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K};

std::vector<float> Random(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double Norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

std::string Label(const KernelTable* t, TensorType type) {
  return std::string(IsaName(t->isa)) + "/" + std::string(gguf::TensorTypeName(type));
}

TEST(KernelsTest, BestTableIsTheWidestThisCpuRuns) {
  std::vector<const KernelTable*> all = Available();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front()->isa, Isa::kScalar);
  EXPECT_EQ(&Best(), all.back());
  std::printf("cpu: %s; kernels: %s\n", Cpu().Describe().c_str(), IsaName(Best().isa));
}

TEST(KernelsTest, EveryTableHasEveryEntry) {
  for (const KernelTable* t : Available()) {
    for (TensorType type : kWeightTypes) {
      EXPECT_NE(t->of(type).vec_dot, nullptr) << Label(t, type);
      EXPECT_NE(t->of(type).vec_dot_multi, nullptr) << Label(t, type);
      EXPECT_NE(t->quantize_act[static_cast<uint32_t>(t->of(type).act_type)], nullptr);
    }
    EXPECT_NE(t->f.rope, nullptr);
    EXPECT_NE(t->attn.fp32_to_fp16, nullptr);
    EXPECT_NE(t->attn.fp16_to_fp32, nullptr);
    EXPECT_NE(t->attn.exp_sum, nullptr);
    EXPECT_NE(t->attn.scores, nullptr);
    EXPECT_NE(t->attn.accumulate, nullptr);
  }
}

// Dot products: each table's dot of the same quantized rows equals the reference to float
// rounding (the inputs are identical bytes; only the summation order may differ).
TEST(KernelsTest, VecDotMatchesReferenceOnIdenticalBytes) {
  const KernelTable& ref = *ForIsa(Isa::kScalar);
  for (int64_t n : {256, 512, 2048, 4096 + 256}) {
    for (TensorType type : kWeightTypes) {
      const TensorType act = ref.of(type).act_type;
      std::vector<float> wf = Random(n, 1 + n), xf = Random(n, 2 + n, 0.5f);
      std::vector<uint8_t> w(quant::RowBytes(type, n)), a(quant::RowBytes(act, n));
      quant::ReferenceOps(type)->quantize_row(wf.data(), w.data(), n);
      ref.quantize_act[static_cast<uint32_t>(act)](xf.data(), a.data(), n);
      const float want = ref.of(type).vec_dot(n, w.data(), a.data());
      const double tol = 2e-5 * Norm(wf) * Norm(xf) + 1e-6;
      for (const KernelTable* t : Available()) {
        const float got = t->of(type).vec_dot(n, w.data(), a.data());
        EXPECT_NEAR(got, want, tol) << Label(t, type) << " n=" << n;
      }
    }
  }
}

// 32-element formats at every block count up to 9 and a few above: the SIMD kernels step over
// several blocks at a time (pairs of blocks, groups of four), so each leftover path runs here; the
// multi-row form with up to 3 rows too.
TEST(KernelsTest, BlockFormatsMatchReferenceAtEveryBlockCount) {
  const KernelTable& ref = *ForIsa(Isa::kScalar);
  for (TensorType type : {TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0,
                          TensorType::kQ5_1, TensorType::kQ8_0}) {
    const TensorType act = ref.of(type).act_type;
    for (int64_t blocks : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 66}) {
      const int64_t n = blocks * 32;
      std::vector<float> wf = Random(n, 11 + n);
      std::vector<uint8_t> w(quant::RowBytes(type, n));
      quant::ReferenceOps(type)->quantize_row(wf.data(), w.data(), n);
      const size_t stride = quant::RowBytes(act, n);
      std::vector<uint8_t> a(stride * 3);
      float want[3];
      double tol[3];
      for (int j = 0; j < 3; ++j) {
        std::vector<float> xf = Random(n, 12 + n + j, 0.5f);
        ref.quantize_act[static_cast<uint32_t>(act)](xf.data(), a.data() + j * stride, n);
        want[j] = ref.of(type).vec_dot(n, w.data(), a.data() + j * stride);
        tol[j] = 2e-5 * Norm(wf) * Norm(xf) + 1e-6;
      }
      for (const KernelTable* t : Available()) {
        EXPECT_NEAR(t->of(type).vec_dot(n, w.data(), a.data()), want[0], tol[0])
            << Label(t, type) << " blocks=" << blocks;
        for (int na = 2; na <= 3; ++na) {
          float out[3];
          t->of(type).vec_dot_multi(n, w.data(), a.data(), stride, na, out);
          for (int j = 0; j < na; ++j) {
            EXPECT_NEAR(out[j], want[j], tol[j])
                << Label(t, type) << " blocks=" << blocks << " na=" << na << " j=" << j;
          }
        }
      }
    }
  }
}

// Same, on data that drives the quantized values to their extremes: constant-sign rows (largest
// mins of the affine formats), isolated spikes (most quants at the middle, a few at the ends),
// and activations that saturate to +-127 (limits of the int16 pair sums in SIMD dots).
TEST(KernelsTest, VecDotMatchesReferenceOnExtremeData) {
  const KernelTable& ref = *ForIsa(Isa::kScalar);
  const int64_t n = 1024;
  std::mt19937_64 rng(77);
  std::uniform_real_distribution<float> u(1.0f, 2.0f);
  auto make = [&](int kind) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) {
      switch (kind) {
        case 0: v[i] = u(rng); break;                        // all positive
        case 1: v[i] = -u(rng); break;                       // all negative
        case 2: v[i] = i % 37 == 0 ? 50.0f : 0.01f * u(rng); break;  // spikes
        default: v[i] = (i / 16) % 2 ? 1.0f : -1.0f; break;  // saturated +-127 blocks
      }
    }
    return v;
  };
  for (TensorType type : kWeightTypes) {
    const TensorType act = ref.of(type).act_type;
    for (int wk = 0; wk < 4; ++wk) {
      for (int ak = 0; ak < 4; ++ak) {
        std::vector<float> wf = make(wk), xf = make(ak);
        std::vector<uint8_t> w(quant::RowBytes(type, n)), a(quant::RowBytes(act, n));
        quant::ReferenceOps(type)->quantize_row(wf.data(), w.data(), n);
        ref.quantize_act[static_cast<uint32_t>(act)](xf.data(), a.data(), n);
        const float want = ref.of(type).vec_dot(n, w.data(), a.data());
        const double tol = 2e-5 * Norm(wf) * Norm(xf) + 1e-6;
        for (const KernelTable* t : Available()) {
          const float got = t->of(type).vec_dot(n, w.data(), a.data());
          EXPECT_NEAR(got, want, tol) << Label(t, type) << " w=" << wk << " a=" << ak;
          float multi[2];
          t->of(type).vec_dot_multi(n, w.data(), a.data(), 0, 2, multi);  // same row twice
          EXPECT_NEAR(multi[0], want, tol) << Label(t, type) << " multi w=" << wk << " a=" << ak;
          EXPECT_NEAR(multi[1], want, tol) << Label(t, type) << " multi w=" << wk << " a=" << ak;
        }
      }
    }
  }
}

TEST(KernelsTest, MultiRowDotEqualsSingleRowDots) {
  const int64_t n = 1024;
  for (const KernelTable* t : Available()) {
    for (TensorType type : kWeightTypes) {
      const TensorType act = t->of(type).act_type;
      const size_t stride = quant::RowBytes(act, n);
      std::vector<float> wf = Random(n, 5);
      std::vector<uint8_t> w(quant::RowBytes(type, n)), a(stride * kMaxMultiRows);
      quant::ReferenceOps(type)->quantize_row(wf.data(), w.data(), n);
      std::vector<float> norms;
      for (int j = 0; j < kMaxMultiRows; ++j) {
        std::vector<float> xf = Random(n, 100 + j);
        norms.push_back(static_cast<float>(Norm(xf)));
        t->quantize_act[static_cast<uint32_t>(act)](xf.data(), a.data() + j * stride, n);
      }
      for (int na = 1; na <= kMaxMultiRows; ++na) {
        float out[kMaxMultiRows];
        t->of(type).vec_dot_multi(n, w.data(), a.data(), stride, na, out);
        for (int j = 0; j < na; ++j) {
          const float single = t->of(type).vec_dot(n, w.data(), a.data() + j * stride);
          EXPECT_EQ(out[j], single) << Label(t, type) << " na=" << na << " j=" << j;
        }
      }
    }
  }
}

// Activation quantizers: each table's output dequantizes to within half a quantum of the input
// (the reference's own error bound), so dots agree with the reference path.
TEST(KernelsTest, ActivationQuantizersMatchReference) {
  const int64_t n = 2048;
  for (const KernelTable* t : Available()) {
    for (TensorType act : {TensorType::kQ8_0, TensorType::kQ8_1, TensorType::kQ8_K}) {
      std::vector<float> x = Random(n, 9, 3.0f);
      std::vector<uint8_t> got(quant::RowBytes(act, n)), want(got.size());
      t->quantize_act[static_cast<uint32_t>(act)](x.data(), got.data(), n);
      quant::ReferenceOps(act)->quantize_row(x.data(), want.data(), n);
      std::vector<float> g(n), w(n);
      quant::ReferenceOps(act)->dequantize_row(got.data(), g.data(), n);
      quant::ReferenceOps(act)->dequantize_row(want.data(), w.data(), n);
      const int block = act == TensorType::kQ8_K ? 256 : 32;
      for (int64_t b = 0; b < n; b += block) {
        float amax = 0;
        for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float quantum = amax / 127;
        for (int64_t i = b; i < b + block; ++i) {
          ASSERT_NEAR(g[i], x[i], 0.5f * quantum * 1.01f + 1e-7f)
              << IsaName(t->isa) << "/" << gguf::TensorTypeName(act) << " i=" << i;
          ASSERT_NEAR(g[i], w[i], quantum * 1.01f + 1e-7f);
        }
      }
    }
  }
}

TEST(KernelsTest, FloatOpsMatchReference) {
  const FloatOps& r = ForIsa(Isa::kScalar)->f;
  for (const KernelTable* t : Available()) {
    const FloatOps& f = t->f;
    SCOPED_TRACE(IsaName(t->isa));
    for (int64_t n : {1, 7, 16, 31, 64, 100, 4096}) {  // 31: a 16-wide step, an 8-wide one and a tail
      std::vector<float> x = Random(n, 11), w = Random(n, 12), y0(n), y1(n);
      r.rmsnorm(x.data(), w.data(), y0.data(), n, 1e-5f);
      f.rmsnorm(x.data(), w.data(), y1.data(), n, 1e-5f);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y1[i], y0[i], 1e-5 * (1 + std::fabs(y0[i])));
      y0 = x;
      y1 = x;
      r.softmax(y0.data(), n);
      f.softmax(y1.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y1[i], y0[i], 1e-6 + 1e-5 * y0[i]);
      r.silu_mul(x.data(), w.data(), y0.data(), n);
      f.silu_mul(x.data(), w.data(), y1.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y1[i], y0[i], 1e-5 * (1 + std::fabs(y0[i])));
      r.add(x.data(), w.data(), y0.data(), n);
      f.add(x.data(), w.data(), y1.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y1[i], y0[i]);
      y0 = x;
      y1 = x;
      r.scale(y0.data(), 0.37f, n);
      f.scale(y1.data(), 0.37f, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y1[i], y0[i]);
      ASSERT_NEAR(f.dot(x.data(), w.data(), n), r.dot(x.data(), w.data(), n),
                  1e-5 * Norm(x) * Norm(w));
      y0 = w;
      y1 = w;
      r.axpy(0.5f, x.data(), y0.data(), n);
      f.axpy(0.5f, x.data(), y1.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y1[i], y0[i], 1e-6 * (1 + std::fabs(y0[i])));
    }
    for (int64_t hd : {32, 64, 128}) {
      for (bool neox : {false, true}) {
        std::vector<float> x = Random(hd, 20), c(hd / 2), s(hd / 2);
        for (int64_t i = 0; i < hd / 2; ++i) {
          const float theta = 7.0f * std::pow(10000.0f, -2.0f * i / hd);
          c[i] = std::cos(theta);
          s[i] = std::sin(theta);
        }
        std::vector<float> a = x, b = x;
        r.rope(a.data(), hd, c.data(), s.data(), neox);
        f.rope(b.data(), hd, c.data(), s.data(), neox);
        for (int64_t i = 0; i < hd; ++i) ASSERT_NEAR(b[i], a[i], 1e-6);
        // Rotation keeps the norm.
        EXPECT_NEAR(Norm(a), Norm(x), 1e-4);
      }
    }
  }
}

// Attention ops: conversions are exact (both round to nearest even), exp_sum and the score and
// accumulate products match the scalar reference on F32, F16 and Q8_0 rows, for tile remainders
// (odd numbers of query, key and value rows) and row lengths that are not multiples of the
// vector width.
TEST(KernelsTest, AttnConversionsAndExpSumMatchReference) {
  const AttnOps& r = ForIsa(Isa::kScalar)->attn;
  for (const KernelTable* t : Available()) {
    SCOPED_TRACE(IsaName(t->isa));
    const AttnOps& a = t->attn;
    ASSERT_NE(a.fp32_to_fp16, nullptr);
    ASSERT_NE(a.scores, nullptr);
    for (int64_t n : {1, 7, 16, 31, 64, 100}) {  // 31: a 16-wide step, an 8-wide one and a tail
      std::vector<float> x = Random(n, 31, 4.0f);
      if (n > 3) x[1] = 1e-6f, x[2] = -70000.0f, x[3] = 0.0f;  // subnormal, overflow, zero
      std::vector<uint16_t> h0(n), h1(n);
      r.fp32_to_fp16(x.data(), h0.data(), n);
      a.fp32_to_fp16(x.data(), h1.data(), n);
      ASSERT_EQ(h1, h0);
      std::vector<float> f0(n), f1(n);
      r.fp16_to_fp32(h0.data(), f0.data(), n);
      a.fp16_to_fp32(h0.data(), f1.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(f1[i], f0[i]) << i;
      std::vector<float> e0(n), e1(n);
      const float m = 2.5f;
      const float s0 = r.exp_sum(x.data(), m, e0.data(), n);
      const float s1 = a.exp_sum(x.data(), m, e1.data(), n);
      EXPECT_NEAR(s1, s0, 1e-5 * s0);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(e1[i], e0[i], 1e-6 * (1 + e0[i])) << i;
    }
  }
}

// n values of `type` (F32, F16 or Q8_0) made from x.
std::vector<uint8_t> ToRow(TensorType type, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> row(quant::RowBytes(type, n));
  if (type == TensorType::kF32) {
    std::memcpy(row.data(), x.data(), n * sizeof(float));
  } else {
    quant::ReferenceOps(type)->quantize_row(x.data(), row.data(), n);
  }
  return row;
}

TEST(KernelsTest, AttnScoresAndAccumulateMatchReference) {
  const AttnOps& r = ForIsa(Isa::kScalar)->attn;
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0}) {
    for (int64_t n : {32, 64, 128, 40, 12}) {
      if (type == TensorType::kQ8_0 && n % 32 != 0) continue;
      for (int64_t nq : {1, 3, 4, 9, 40, 70}) {  // 40, 70: whole 16-row tiles, pairs of them, 64-row blocks
        for (int64_t nk : {1, 2, 7, 33}) {
          SCOPED_TRACE(std::string(gguf::TensorTypeName(type)) + " n=" + std::to_string(n) +
                       " nq=" + std::to_string(nq) + " nk=" + std::to_string(nk));
          const int64_t ldq = n + 3, lds = nk + 5, ldo = n + 1;
          std::vector<float> q = Random(nq * ldq, 40 + n);
          std::vector<std::vector<uint8_t>> rows;
          std::vector<const void*> ptrs;
          for (int64_t j = 0; j < nk; ++j) rows.push_back(ToRow(type, Random(n, 100 + j)));
          for (const auto& row : rows) ptrs.push_back(row.data());
          std::vector<float> s0(nq * lds, -1.0f), o0 = Random(nq * ldo, 50);
          r.scores(type, n, q.data(), ldq, nq, ptrs.data(), nk, s0.data(), lds);
          std::vector<float> p = s0;  // any weights will do; scores are at hand
          r.accumulate(type, n, p.data(), lds, nq, ptrs.data(), nk, o0.data(), ldo);
          for (const KernelTable* t : Available()) {
            SCOPED_TRACE(IsaName(t->isa));
            std::vector<float> s1(nq * lds, -1.0f), o1 = Random(nq * ldo, 50);
            t->attn.scores(type, n, q.data(), ldq, nq, ptrs.data(), nk, s1.data(), lds);
            for (int64_t i = 0; i < nq; ++i) {
              for (int64_t j = 0; j < lds; ++j) {
                ASSERT_NEAR(s1[i * lds + j], s0[i * lds + j], 1e-4 * std::sqrt(n)) << i << "," << j;
              }
            }
            t->attn.accumulate(type, n, p.data(), lds, nq, ptrs.data(), nk, o1.data(), ldo);
            for (int64_t i = 0; i < nq * ldo; ++i) {
              ASSERT_NEAR(o1[i], o0[i], 1e-4 * std::sqrt(n * nk) * (1 + std::fabs(o0[i]))) << i;
            }
          }
        }
      }
    }
  }
}

// Batch invariance: a query row's scores and accumulated output do not depend on how many other
// rows share the call (speculative verification and a server's batches must give the bits a
// decode step gives).
TEST(KernelsTest, AttnRowsAreTheSameAloneAndInAGroup) {
  for (const KernelTable* t : Available()) {
    for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0}) {
      const int64_t n = 64, nk = 37, nq = 41, ld = n + 3, lds = nk + 1;
      SCOPED_TRACE(std::string(IsaName(t->isa)) + " " + std::string(gguf::TensorTypeName(type)));
      std::vector<float> q = Random(nq * ld, 7);
      std::vector<std::vector<uint8_t>> rows;
      std::vector<const void*> ptrs;
      for (int64_t j = 0; j < nk; ++j) rows.push_back(ToRow(type, Random(n, 300 + j)));
      for (const auto& row : rows) ptrs.push_back(row.data());
      std::vector<float> s_all(nq * lds), o_all(nq * ld, 0.5f);
      t->attn.scores(type, n, q.data(), ld, nq, ptrs.data(), nk, s_all.data(), lds);
      t->attn.accumulate(type, n, s_all.data(), lds, nq, ptrs.data(), nk, o_all.data(), ld);
      for (int64_t i = 0; i < nq; ++i) {
        std::vector<float> s1(lds), o1(ld, 0.5f);
        t->attn.scores(type, n, q.data() + i * ld, ld, 1, ptrs.data(), nk, s1.data(), lds);
        for (int64_t j = 0; j < nk; ++j) ASSERT_EQ(s1[j], s_all[i * lds + j]) << "row " << i << " cell " << j;
        t->attn.accumulate(type, n, s_all.data() + i * lds, lds, 1, ptrs.data(), nk, o1.data(), ld);
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(o1[j], o_all[i * ld + j]) << "row " << i << " elem " << j;
      }
    }
  }
}

TEST(KernelsTest, ScalarRopeRotatesTheDocumentedPairs) {
  const FloatOps& r = ForIsa(Isa::kScalar)->f;
  float x[4] = {1, 2, 3, 4};
  const float c[2] = {0, 1}, s[2] = {1, 0};  // pair 0 turns by 90 degrees, pair 1 stays
  r.rope(x, 4, c, s, false);                 // pairs (x0, x1), (x2, x3)
  EXPECT_FLOAT_EQ(x[0], -2);
  EXPECT_FLOAT_EQ(x[1], 1);
  EXPECT_FLOAT_EQ(x[2], 3);
  float y[4] = {1, 2, 3, 4};
  r.rope(y, 4, c, s, true);                  // pairs (y0, y2), (y1, y3)
  EXPECT_FLOAT_EQ(y[0], -3);
  EXPECT_FLOAT_EQ(y[2], 1);
  EXPECT_FLOAT_EQ(y[1], 2);
}

}  // namespace
}  // namespace tandem::kernels

#include "base/sys.h"
#include "kernels/interleave.h"
#include "kernels/matmul.h"

namespace tandem::kernels {
namespace {

// Interleaved Q4_0 / Q5_0 / Q8_0 / Q4_K / Q6_K: the layout is the file's rows rearranged (the reference
// gemm over it equals the reference dot of each row, up to float rounding), every table's kernel
// equals the reference gemm (Q4_K and Q6_K: to the bit), and a row's result is the same to the bit for every
// number of activation rows.
TEST(InterleavedTest, GemmMatchesTheRowDotsAndIsTheSameForEveryRowCount) {
  const int64_t rows = 32, n = 512;
  constexpr int kRows = 16;  // the most activation rows any table's call takes (AMX: a tile's)
  for (TensorType type :
       {TensorType::kQ4_0, TensorType::kQ5_0, TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ6_K}) {
    SCOPED_TRACE(std::string(gguf::TensorTypeName(type)));
    const bool k4 = type == TensorType::kQ4_K || type == TensorType::kQ6_K;  // K-quants: Q8_K activations
    const quant::TypeOps& ref = *quant::ReferenceOps(type);
    const size_t row_bytes = quant::RowBytes(type, n);
    std::vector<uint8_t> w(row_bytes * rows), wi(row_bytes * rows);
    std::vector<float> wf;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> v = Random(n, 1000 + r);
      ref.quantize_row(v.data(), w.data() + r * row_bytes, n);
      wf.insert(wf.end(), v.begin(), v.end());
    }
    Interleave(type, w.data(), wi.data(), rows, n);
    // Activations in the interleaved kernels' format (Q8S; K-quants: Q8_K) and in the row dot's
    // (Q8_0; K-quants: Q8_K).
    const TensorType row_act = k4 ? TensorType::kQ8_K : TensorType::kQ8_0;
    const size_t s_stride = InterleavedActRowBytes(type, n), q_stride = quant::RowBytes(row_act, n);
    std::vector<uint8_t> as(s_stride * kRows), aq(q_stride * kRows);
    std::vector<double> norms;
    for (int j = 0; j < kRows; ++j) {
      std::vector<float> x = Random(n, 2000 + j);
      norms.push_back(Norm(x));
      quant::ReferenceOps(row_act)->quantize_row(x.data(), aq.data() + j * q_stride, n);
      if (k4) {
        std::memcpy(as.data() + j * s_stride, aq.data() + j * q_stride, q_stride);
        FinishActRow(type, as.data() + j * s_stride, n);
        continue;
      }
      QuantizeQ8SReference(x.data(), as.data() + j * s_stride, n);
      // The Q8S quants are Q8_0's; the sum is theirs.
      const auto* s = reinterpret_cast<const BlockQ8S*>(as.data() + j * s_stride);
      const auto* q = reinterpret_cast<const quant::BlockQ8_0*>(aq.data() + j * q_stride);
      for (int64_t b = 0; b < n / quant::kQK; ++b) {
        ASSERT_EQ(std::memcmp(s[b].qs, q[b].qs, quant::kQK), 0);
        ASSERT_EQ(s[b].d, quant::Fp16ToFp32(q[b].d));
        int sum = 0;
        for (int e = 0; e < quant::kQK; ++e) sum += q[b].qs[e];
        ASSERT_EQ(s[b].sum, sum);
      }
    }
    const size_t group = row_bytes * kInterleaveRows;
    std::vector<float> want(kRows * rows);
    for (int64_t g = 0; g < rows / kInterleaveRows; ++g) {
      GemmInterleavedReference(type, n, wi.data() + g * group, as.data(), s_stride, kRows,
                               want.data() + g * kInterleaveRows, rows);
    }
    for (int j = 0; j < kRows; ++j) {
      for (int64_t r = 0; r < rows; ++r) {
        const float dot = ref.vec_dot(n, w.data() + r * row_bytes, aq.data() + j * q_stride);
        ASSERT_NEAR(want[j * rows + r], dot, 1e-5 * Norm(std::vector<float>(wf.begin() + r * n, wf.begin() + (r + 1) * n)) * norms[j])
            << "row " << r << " activation " << j;
      }
    }
    int tables = 0, unpacked_checked = 0, streamed_checked = 0;
    for (const KernelTable* t : Available()) {
      const GemmInterleavedFn gemm = t->gemm_interleaved[static_cast<uint32_t>(type)];
      if (gemm == nullptr) continue;
      ++tables;
      SCOPED_TRACE(IsaName(t->isa));
      std::vector<uint8_t> at(s_stride * kRows);
      for (int j = 0; j < kRows; ++j) {
        std::vector<float> x = Random(n, 2000 + j);
        if (k4) {
          t->quantize_act[static_cast<uint32_t>(TensorType::kQ8_K)](x.data(), at.data() + j * s_stride, n);
          FinishActRow(type, at.data() + j * s_stride, n);
        } else {
          t->quantize_q8s(x.data(), at.data() + j * s_stride, n);
        }
      }
      ASSERT_EQ(std::memcmp(at.data(), as.data(), at.size()), 0) << "the table's activation quantizer";
      std::vector<float> alone(kRows * rows);
      ASSERT_LE(t->gemm_interleaved_rows, kRows);
      ASSERT_GE(t->gemm_interleaved_rows, kMaxMultiRows);
      for (int na = 1; na <= t->gemm_interleaved_rows; ++na) {
        std::vector<float> got(kRows * rows, -1.0f);
        for (int64_t g = 0; g < rows / kInterleaveRows; ++g) {
          gemm(n, wi.data() + g * group, at.data(), s_stride, na, got.data() + g * kInterleaveRows, rows);
        }
        for (int j = 0; j < na; ++j) {
          for (int64_t r = 0; r < rows; ++r) {
            if (k4) {
              ASSERT_EQ(got[j * rows + r], want[j * rows + r]) << "row " << r << " activation " << j << " na " << na;
            } else {
              ASSERT_NEAR(got[j * rows + r], want[j * rows + r], 1e-5 * (std::fabs(want[j * rows + r]) + 1))
                  << "row " << r << " activation " << j << " na " << na;
            }
            if (na == 1) alone[r] = got[r];
            if (j == 0) {
              ASSERT_EQ(got[r], alone[r]) << "row " << r << " alone and with " << na << " activation rows";
            }
          }
        }
        // A small batch's streaming kernel gives the same bits.
        const GemmInterleavedFn streamed = t->gemm_streamed[static_cast<uint32_t>(type)];
        if (streamed != nullptr && na <= kMaxMultiRows) {
          std::vector<float> from_streamed(kRows * rows, -1.0f);
          for (int64_t g = 0; g < rows / kInterleaveRows; ++g) {
            streamed(n, wi.data() + g * group, at.data(), s_stride, na, from_streamed.data() + g * kInterleaveRows, rows);
          }
          for (int64_t i = 0; i < kRows * rows; ++i) {
            ASSERT_EQ(from_streamed[i], i < na * rows ? got[i] : -1.0f) << "streamed, output " << i << " na " << na;
          }
          ++streamed_checked;
        }
        // Weights unpacked ahead (a prompt's) give the same bits as the kernel unpacking them.
        const UnpackedGemm& up = t->gemm_unpacked[static_cast<uint32_t>(type)];
        if (up.gemm == nullptr || na <= kMaxMultiRows) continue;
        ASSERT_GT(up.bytes_per_block, 0);
        std::vector<float> from_unpacked(kRows * rows, -1.0f);
        for (int64_t g = 0; g < rows / kInterleaveRows; ++g) {
          // One byte into a heap block (so, with the allocator's alignment of at least 8, not
          // 64-byte aligned): the kernel takes any alignment.
          std::vector<uint8_t> u(up.bytes_per_block * (n / quant::kQK) + 1, 0xA5);
          up.unpack(n, wi.data() + g * group, u.data() + 1);
          up.gemm(n, u.data() + 1, at.data(), s_stride, na, from_unpacked.data() + g * kInterleaveRows, rows);
        }
        for (int64_t i = 0; i < na * rows; ++i) {
          ASSERT_EQ(from_unpacked[i], got[i]) << "unpacked ahead, output " << i << " na " << na;
        }
        ++unpacked_checked;
      }
    }
    if (Cpu().avx512vnni) {
      EXPECT_GE(tables, 1) << "no interleaved kernel on a CPU with AVX-512 VNNI";
      EXPECT_EQ(streamed_checked, tables * kMaxMultiRows) << "every table streams small batches";
    }
    // Where the CPU has AMX-INT8 and the OS grants the tile state, the AMX table is among those
    // checked above (not left out unnoticed).
    if (Cpu().avx512vnni && Cpu().avx512vbmi && Cpu().amx_int8 && sys::RequestAmxTiles()) {
      const KernelTable* amx = ForIsa(Isa::kAmx);
      ASSERT_NE(amx, nullptr) << "AMX-INT8 granted but no AMX table";
      EXPECT_EQ(amx->gemm_interleaved_rows, 16);
      EXPECT_GE(tables, 2);
      if (type != TensorType::kQ8_0 && type != TensorType::kQ6_K) {
        EXPECT_EQ(unpacked_checked, 16 - kMaxMultiRows) << "the AMX table unpacks Q4_0, Q5_0 and Q4_K ahead";
      }
    }
  }
}

// A K-quant matrix `w` (16 rows of n) at the ends of its ranges against activation rows of quants
// all -127 or all 127 (the Q8_K quantizer's range: a constant row) or alternating, and rows made
// all -128 or alternating -128 and 127 by hand (the whole int8 range, which the kernels must take
// too): every interleaved table gives the reference gemm's bits for every row count, and the
// reference gemm is the reference row dot, up to float rounding. A CPU with AVX-512 VNNI must have
// such a table; without any, the test is skipped by name (only the reference was checked).
void CheckInterleavedKAtTheEnds(TensorType type, const std::vector<uint8_t>& w, int64_t n) {
  const int64_t rows = 16;
  constexpr int kRows = 16;
  const size_t row_bytes = quant::RowBytes(type, n);
  std::vector<uint8_t> wi(w.size());
  Interleave(type, w.data(), wi.data(), rows, n);
  // The activation rows, made by the reference quantizer (and by hand) once for every table.
  const size_t stride = InterleavedActRowBytes(type, n);
  std::vector<uint8_t> act(stride * kRows);
  for (int j = 0; j < kRows; ++j) {
    const bool alternate = j % 2 == 1, by_hand = j % 4 >= 2;
    std::vector<float> x(n, j % 8 < 4 ? -1.0f : 1.0f);
    if (alternate) {
      for (int64_t e = 1; e < n; e += 2) x[e] = -x[e];
    }
    uint8_t* row = act.data() + j * stride;
    quant::ReferenceOps(TensorType::kQ8_K)->quantize_row(x.data(), row, n);
    auto* y = reinterpret_cast<quant::BlockQ8_K*>(row);
    ASSERT_EQ(std::abs(y[0].qs[0]), 127) << "activation row " << j;
    if (by_hand) {  // -128 where the quantizer gave -127 or 127 at even positions
      for (int64_t b = 0; b < n / quant::kQKK; ++b) {
        for (int e = 0; e < quant::kQKK; ++e) {
          y[b].qs[e] = e % 2 == 0 || !alternate ? int8_t{-128} : int8_t{127};
        }
        for (int k = 0; k < quant::kQKK / 16; ++k) {
          int sum = 0;
          for (int e = 16 * k; e < 16 * (k + 1); ++e) sum += y[b].qs[e];
          y[b].bsums[k] = static_cast<int16_t>(sum);
        }
      }
    }
    FinishActRow(type, row, n);
  }
  std::vector<float> want(kRows * rows);
  GemmInterleavedReference(type, n, wi.data(), act.data(), stride, kRows, want.data(), rows);
  // The reference gemm is the reference row dot here too, up to float rounding (relative to the
  // sum of the products' magnitudes).
  const quant::TypeOps& qw = *quant::ReferenceOps(type);
  const quant::TypeOps& q8k = *quant::ReferenceOps(TensorType::kQ8_K);
  for (int j = 0; j < kRows; ++j) {
    std::vector<float> xa(n), xw(n);
    q8k.dequantize_row(act.data() + j * stride, xa.data(), n);
    for (int64_t r = 0; r < rows; ++r) {
      qw.dequantize_row(w.data() + r * row_bytes, xw.data(), n);
      double magnitude = 0;
      for (int64_t e = 0; e < n; ++e) magnitude += std::fabs(static_cast<double>(xw[e]) * xa[e]);
      const float dot = qw.vec_dot(n, w.data() + r * row_bytes, act.data() + j * stride);
      ASSERT_NEAR(want[j * rows + r], dot, 1e-5 * magnitude) << "row " << r << " activation " << j;
    }
  }
  int tables = 0;
  for (const KernelTable* t : Available()) {
    const GemmInterleavedFn gemm = t->gemm_interleaved[static_cast<uint32_t>(type)];
    if (gemm == nullptr) continue;
    ++tables;
    SCOPED_TRACE(IsaName(t->isa));
    for (int na = 1; na <= t->gemm_interleaved_rows; ++na) {
      std::vector<float> got(kRows * rows, -1.0f);
      gemm(n, wi.data(), act.data(), stride, na, got.data(), rows);
      for (int j = 0; j < na; ++j) {
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(got[j * rows + r], want[j * rows + r]) << "row " << r << " activation " << j << " na " << na;
        }
      }
    }
  }
  const std::string name(gguf::TensorTypeName(type));
  if (Cpu().avx512vnni) {
    EXPECT_GE(tables, 1) << "no interleaved " << name << " kernel on a CPU with AVX-512 VNNI";
  }
  if (tables == 0) GTEST_SKIP() << "no interleaved " << name << " kernel on this CPU: only the reference gemm was checked";
}

// Interleaved Q4_K at the ends of its ranges, to the bit, for every table and row count (above):
// nibbles all 0 or all 15 with every scale and min 63. The AMX kernel's sub-block sums are 16-bit
// numbers (T_j = S_j - 7 B_j, at most 32 * 128 * 8 = 32768 from below); a kernel that used them
// without the bias taken out would overflow here.
TEST(InterleavedTest, Q4KAtTheEndsOfItsRangesIsExact) {
  const int64_t rows = 16, n = 512;
  const size_t row_bytes = quant::RowBytes(TensorType::kQ4_K, n);
  std::vector<uint8_t> w(row_bytes * rows);
  const uint8_t fills[4] = {0x00, 0xFF, 0x0F, 0xF0};  // nibbles 0/0, 15/15, 15/0, 0/15
  for (int64_t r = 0; r < rows; ++r) {
    auto* blocks = reinterpret_cast<quant::BlockQ4_K*>(w.data() + r * row_bytes);
    for (int64_t b = 0; b < n / quant::kQKK; ++b) {
      quant::BlockQ4_K& q = blocks[b];
      q.d = quant::Fp32ToFp16(0.5f + 0.125f * static_cast<float>(r));
      q.dmin = quant::Fp32ToFp16(0.25f);
      std::memset(q.scales, 0xFF, sizeof(q.scales));  // every 6-bit scale and min 63
      std::memset(q.qs, fills[(r + b) % 4], sizeof(q.qs));
    }
  }
  CheckInterleavedKAtTheEnds(TensorType::kQ4_K, w, n);
}

// The same for Q6_K: stored values all 0 or all 63 (or halves of each) with scales -128 and 127. A
// group's sum of 16 stored values times the quants reaches 16 * 63 * -128 = -129024, past 16 bits:
// the AVX-512 kernel splits it into a low byte and an int16 (S >> 8) for its VPDPWSSD against
// (sc, 256 sc), whose upper half is -32768 for sc = -128.
TEST(InterleavedTest, Q6KAtTheEndsOfItsRangesIsExact) {
  const int64_t rows = 16, n = 512;
  const size_t row_bytes = quant::RowBytes(TensorType::kQ6_K, n);
  std::vector<uint8_t> w(row_bytes * rows);
  const uint8_t fills[4] = {0x00, 0xFF, 0x0F, 0xF0};
  for (int64_t r = 0; r < rows; ++r) {
    auto* blocks = reinterpret_cast<quant::BlockQ6_K*>(w.data() + r * row_bytes);
    for (int64_t b = 0; b < n / quant::kQKK; ++b) {
      quant::BlockQ6_K& q = blocks[b];
      q.d = quant::Fp32ToFp16(0.5f + 0.125f * static_cast<float>(r));
      std::memset(q.ql, fills[(r + b) % 4], sizeof(q.ql));
      std::memset(q.qh, fills[(r + b + r / 4) % 4], sizeof(q.qh));
      for (int k = 0; k < quant::kQKK / 16; ++k) q.scales[k] = (k + r) % 2 == 0 ? int8_t{-128} : int8_t{127};
    }
  }
  CheckInterleavedKAtTheEnds(TensorType::kQ6_K, w, n);
}

// MatMulInterleaved over a pool equals MatMul on the file layout within rounding, and a token's
// outputs do not depend on how many tokens share the call. The outputs go to rows wider than the
// matrix's (a stride of rows + 5), whose padding stays as it was.
TEST(InterleavedTest, MatMulInterleavedEqualsMatMul) {
  const KernelTable& k = Best();
  if (k.gemm_interleaved[static_cast<uint32_t>(TensorType::kQ4_0)] == nullptr) GTEST_SKIP() << "no interleaved kernels here";
  ThreadPool pool(2);
  Scratch scratch;
  // More than one call's rows on every table, and pieces of work larger than a block of groups
  // (matmul.cc: 8): a thread takes a quarter of its share at a time, 9 of its 33 of the 65 groups.
  // 45 tokens: on the AMX table three groups of more than 8 (16, 16, 13), read from weights
  // unpacked ahead (UnpackedGemm); 21: one such group and one of 5 on the VNNI kernel. 2, 8 and
  // 13: small batches, staged (matmul.cc), one kernel call per group (13 on the VNNI table: two).
  const int64_t rows = 1040, stride = rows + 5;
  constexpr float kPad = -7.5f;
  for (const int64_t tokens : {int64_t{2}, int64_t{8}, int64_t{13}, int64_t{21}, int64_t{45}})
  for (TensorType type :
       {TensorType::kQ4_0, TensorType::kQ5_0, TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ6_K})
  for (int64_t n : {256, 512, 768, 800}) {
    // 800: an odd number of 32-element blocks (the tile kernels' last block outside a pair).
    if (n % quant::kQKK != 0 && (type == TensorType::kQ4_K || type == TensorType::kQ6_K)) continue;
    SCOPED_TRACE(std::string(gguf::TensorTypeName(type)) + " n=" + std::to_string(n) + " tokens " + std::to_string(tokens));
    const size_t row_bytes = quant::RowBytes(type, n);
    std::vector<uint8_t> w(row_bytes * rows), wi(w.size());
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> v = Random(n, 50 + r);
      quant::ReferenceOps(type)->quantize_row(v.data(), w.data() + r * row_bytes, n);
    }
    Interleave(type, w.data(), wi.data(), rows, n);
    const std::vector<float> x = Random(n * tokens, 77);
    std::vector<float> y0(rows * tokens), y1(stride * tokens, kPad), y2(rows);
    MatMul(k, pool, type, w.data(), rows, n, x.data(), tokens, y0.data(), rows, scratch);
    MatMulInterleaved(k, pool, type, wi.data(), rows, n, x.data(), tokens, y1.data(), stride, scratch);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < rows; ++i) {
        ASSERT_NEAR(y1[t * stride + i], y0[t * rows + i], 1e-4 * (std::fabs(y0[t * rows + i]) + 1)) << t << " " << i;
      }
      for (int64_t i = rows; i < stride; ++i) ASSERT_EQ(y1[t * stride + i], kPad) << "padding of token " << t;
    }
    for (int64_t t = 0; t < tokens; ++t) {
      MatMulInterleaved(k, pool, type, wi.data(), rows, n, x.data() + t * n, 1, y2.data(), rows, scratch);
      ASSERT_EQ(std::memcmp(y2.data(), y1.data() + t * stride, rows * sizeof(float)), 0) << "token " << t;
    }
  }
}

}  // namespace
}  // namespace tandem::kernels
