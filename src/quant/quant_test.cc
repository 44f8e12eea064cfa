#include "quant/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tandem::quant {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// ---- conversions ----

TEST(Fp16Test, AllHalfValuesRoundTripThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    ASSERT_EQ(Fp32ToFp16(f), h) << "half 0x" << std::hex << h;
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    ASSERT_EQ(std::isnan(f), is_nan) << std::hex << h;
  }
}

TEST(Fp16Test, KnownValues) {
  EXPECT_EQ(Fp16ToFp32(0x3C00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(0xC000), -2.0f);
  EXPECT_EQ(Fp16ToFp32(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(Fp16ToFp32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(Fp16ToFp32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(Fp16ToFp32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Fp16ToFp32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(Bits(Fp16ToFp32(0x8000)), 0x80000000u);  // -0 keeps its sign

  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(65519.99f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7C00);  // the tie rounds to even: infinity
  EXPECT_EQ(Fp32ToFp16(1e10f), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(-1e10f), 0xFC00);
  EXPECT_EQ(Fp32ToFp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie: to even (down)
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie: to even (up)
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie with 0: to even
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 ulp: tie, to even
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1023.5f, -24)), 0x0400);  // carries into normal
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(Fp32ToFp16(FromBits(1)), 0x0000);  // float subnormal
  EXPECT_EQ(Fp32ToFp16(-0.0f), 0x8000);
  const uint16_t nan = Fp32ToFp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x3FF, 0);
  EXPECT_NE(Fp32ToFp16(FromBits(0x7F800001)) & 0x3FF, 0);  // low payload only: still NaN
}

// Every float rounds to the nearer of the two halves around it, ties to the even one.
TEST(Fp16Test, RoundsToNearestEvenOnAStrideOfAllFloats) {
  for (uint64_t u = 0; u < 0x477FF000u; u += 4099) {  // positive floats below the overflow point
    const float f = FromBits(static_cast<uint32_t>(u));
    const uint16_t h = Fp32ToFp16(f);
    const double v = Fp16ToFp32(h);
    const double err = std::fabs(v - f);
    if (h > 0) {
      const double below = std::fabs(static_cast<double>(Fp16ToFp32(h - 1)) - f);
      ASSERT_TRUE(err < below || (err == below && (h & 1) == 0)) << f;
    }
    if (h < 0x7BFF) {
      const double above = std::fabs(static_cast<double>(Fp16ToFp32(h + 1)) - f);
      ASSERT_TRUE(err < above || (err == above && (h & 1) == 0)) << f;
    }
    ASSERT_EQ(Fp32ToFp16(-f), h | 0x8000);
  }
}

TEST(Bf16Test, AllValuesRoundTripAndRoundToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Bf16ToFp32(static_cast<uint16_t>(h));
    ASSERT_EQ(Bits(f), h << 16);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(f))));
    } else {
      ASSERT_EQ(Fp32ToBf16(f), h);
    }
  }
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3F808000)), 0x3F80);  // tie: to even (down)
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3F818000)), 0x3F82);  // tie: to even (up)
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3F808001)), 0x3F81);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7F7FFFFF)), 0x7F80);  // max float rounds to infinity
  EXPECT_EQ(Fp32ToBf16(FromBits(0x00000001)), 0x0000);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7F800001)) & 0x7F80, 0x7F80);  // NaN with low payload
  EXPECT_NE(Fp32ToBf16(FromBits(0x7F800001)) & 0x7F, 0);
  EXPECT_EQ(Fp32ToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
}

// ---- table ----

TEST(QuantTableTest, SupportedTypesAndRowBytes) {
  size_t count = 0;
  const TensorType* types = SupportedTypes(&count);
  ASSERT_EQ(count, 15u);
  EXPECT_EQ(types[0], TensorType::kF32);
  EXPECT_EQ(types[count - 2], TensorType::kQ8_1);
  EXPECT_EQ(types[count - 1], TensorType::kQ8_K);
  for (size_t i = 0; i < count; ++i) {
    const TypeOps* ops = ReferenceOps(types[i]);
    ASSERT_NE(ops, nullptr);
    EXPECT_EQ(ops->type, types[i]);
    EXPECT_NE(ops->dequantize_row, nullptr);
    EXPECT_NE(ops->quantize_row, nullptr);
    EXPECT_EQ(ops->vec_dot == nullptr, i >= count - 2) << gguf::TensorTypeName(types[i]);
  }
  EXPECT_EQ(ReferenceOps(TensorType::kIQ2_XXS), nullptr);
  EXPECT_EQ(ReferenceOps(TensorType::kQ4_K)->act_type, TensorType::kQ8_K);
  EXPECT_EQ(ReferenceOps(TensorType::kQ5_1)->act_type, TensorType::kQ8_1);
  EXPECT_EQ(ReferenceOps(TensorType::kQ5_0)->act_type, TensorType::kQ8_0);
  EXPECT_EQ(ReferenceOps(TensorType::kBF16)->act_type, TensorType::kF32);
  EXPECT_EQ(RowBytes(TensorType::kF32, 64), 256u);
  EXPECT_EQ(RowBytes(TensorType::kQ4_0, 64), 36u);
  EXPECT_EQ(RowBytes(TensorType::kQ4_K, 512), 288u);
  EXPECT_EQ(RowBytes(TensorType::kQ6_K, 2048), 8u * 210);
  EXPECT_EQ(RowBytes(TensorType::kQ8_K, 256), 292u);
}

// ---- hand-made blocks: element order within a block ----

TEST(QuantLayoutTest, Q4_0AndQ5_0ElementOrder) {
  BlockQ4_0 b{};
  b.d = Fp32ToFp16(0.5f);
  b.qs[0] = 0x9A;   // element 0: 10 - 8 = 2; element 16: 9 - 8 = 1
  b.qs[15] = 0x0F;  // element 15: 7; element 31: -8
  for (int j = 1; j < 15; ++j) b.qs[j] = 0x88;
  float out[32];
  ReferenceOps(TensorType::kQ4_0)->dequantize_row(&b, out, 32);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[16], 0.5f);
  EXPECT_EQ(out[15], 3.5f);
  EXPECT_EQ(out[31], -4.0f);
  EXPECT_EQ(out[1], 0.0f);

  BlockQ5_0 c{};
  c.d = Fp32ToFp16(1.0f);
  for (int j = 0; j < 16; ++j) c.qs[j] = 0x00;
  c.qh[0] = 0x01;  // element 0 gets 16: 0
  c.qh[2] = 0x01;  // element 16 gets 16: 0
  ReferenceOps(TensorType::kQ5_0)->dequantize_row(&c, out, 32);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[16], 0.0f);
  EXPECT_EQ(out[1], -16.0f);
  EXPECT_EQ(out[17], -16.0f);
}

// ---- quantizers and dot products on random data ----

std::vector<float> Gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double RelativeRms(const std::vector<float>& ref, const std::vector<float>& got) {
  double err = 0, sig = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    sig += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(err / sig);
}

std::vector<float> RoundTrip(TensorType t, const std::vector<float>& x) {
  const TypeOps* ops = ReferenceOps(t);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(RowBytes(t, n));
  ops->quantize_row(x.data(), q.data(), n);
  std::vector<float> y(x.size());
  ops->dequantize_row(q.data(), y.data(), n);
  return y;
}

struct Bound {
  TensorType type;
  double round_trip;  // relative RMS error of quantize then dequantize, Gaussian data
  double vec_dot;     // |vec_dot - exact| / (|w| |x|), activations quantized as the type wants
};

// Bounds sit about 10% above what the reference quantizers reach on this (fixed-seed) data; the
// figures printed by the tests below are the measured ones.
constexpr Bound kBounds[] = {
    {TensorType::kF32, 0.0, 1e-6},       {TensorType::kF16, 2.4e-4, 1e-6},
    {TensorType::kBF16, 1.9e-3, 1e-6},   {TensorType::kQ8_0, 6.0e-3, 1.2e-4},
    {TensorType::kQ5_1, 3.7e-2, 1.2e-4}, {TensorType::kQ5_0, 4.5e-2, 1.2e-4},
    {TensorType::kQ4_1, 7.7e-2, 1.2e-4}, {TensorType::kQ4_0, 9.0e-2, 1.2e-4},
    {TensorType::kQ6_K, 1.9e-2, 2.5e-4}, {TensorType::kQ5_K, 4.0e-2, 2.5e-4},
    {TensorType::kQ4_K, 7.9e-2, 2.5e-4}, {TensorType::kQ3_K, 1.6e-1, 2.5e-4},
    {TensorType::kQ2_K, 3.0e-1, 2.5e-4}, {TensorType::kQ8_1, 6.0e-3, 0},
    {TensorType::kQ8_K, 8.0e-3, 0},
};

TEST(QuantizeTest, RoundTripErrorWithinPerTypeBound) {
  const std::vector<float> x = Gaussian(256 * 64, 1);
  for (const Bound& b : kBounds) {
    const double e = RelativeRms(x, RoundTrip(b.type, x));
    std::printf("round trip %-5s relative RMS error %.5f (bound %.5f)\n",
                std::string(gguf::TensorTypeName(b.type)).c_str(), e, b.round_trip);
    EXPECT_LE(e, b.round_trip) << gguf::TensorTypeName(b.type);
    if (b.type != TensorType::kF32) {
      EXPECT_GT(e, 0.0) << gguf::TensorTypeName(b.type);
    }
  }
}

// Data with a wide range of magnitudes per block (outliers, small blocks, zero blocks).
TEST(QuantizeTest, ZeroConstantAndOutlierBlocks) {
  std::vector<float> x(512, 0.0f);
  for (int i = 256; i < 512; ++i) x[i] = (i % 17 == 0) ? 100.0f : 0.01f * static_cast<float>(i % 7);
  for (const Bound& b : kBounds) {
    std::vector<float> y = RoundTrip(b.type, x);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << gguf::TensorTypeName(b.type) << " " << i;
    for (int i = 256; i < 512; ++i)
      ASSERT_TRUE(std::isfinite(y[i])) << gguf::TensorTypeName(b.type);
    // The outliers survive in every format.
    EXPECT_NEAR(y[272], 100.0f, 2.0f) << gguf::TensorTypeName(b.type);
  }
  std::vector<float> c(256, -0.75f);
  for (const Bound& b : kBounds) {
    std::vector<float> y = RoundTrip(b.type, c);
    EXPECT_LE(RelativeRms(c, y), b.round_trip) << gguf::TensorTypeName(b.type);
  }
}

// Requantizing dequantized values finds the same blocks, except where a block has two exact
// encodings: when its largest magnitudes are level 7 on both sides, (d, q) and (-d, -q) decode to
// the same values (found: 1 block of 128 for Q4_0 and for Q5_0 on this data). Those must decode
// identically.
TEST(QuantizeTest, RequantizingADequantizedRowGivesTheSameBlocks) {
  const std::vector<float> x = Gaussian(256 * 16, 2);
  for (TensorType t : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ5_0, TensorType::kF16,
                       TensorType::kBF16}) {
    const TypeOps* ops = ReferenceOps(t);
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q1(RowBytes(t, n)), q2(RowBytes(t, n));
    ops->quantize_row(x.data(), q1.data(), n);
    std::vector<float> y(x.size());
    ops->dequantize_row(q1.data(), y.data(), n);
    ops->quantize_row(y.data(), q2.data(), n);
    const size_t block_bytes = gguf::TensorTypeTraits(t).type_size;
    const int64_t block_elems = gguf::TensorTypeTraits(t).block_size;
    int differing = 0;
    for (size_t i = 0; i < q1.size(); i += block_bytes) {
      if (std::memcmp(&q1[i], &q2[i], block_bytes) == 0) continue;
      ++differing;
      std::vector<float> z(static_cast<size_t>(block_elems));
      ops->dequantize_row(&q2[i], z.data(), block_elems);
      const size_t first = i / block_bytes * static_cast<size_t>(block_elems);
      for (size_t j = 0; j < z.size(); ++j) ASSERT_EQ(z[j], y[first + j]);
    }
    std::printf("requantize %-5s: %d of %zu blocks differ (same values)\n",
                std::string(gguf::TensorTypeName(t)).c_str(), differing, q1.size() / block_bytes);
    EXPECT_LE(differing, 2) << gguf::TensorTypeName(t);
    if (t == TensorType::kQ8_0 || t == TensorType::kF16 || t == TensorType::kBF16) {
      EXPECT_EQ(differing, 0);
    }
  }
}

TEST(ActivationTest, Q8_1SumAndQ8_KBlockSums) {
  const std::vector<float> x = Gaussian(256, 3);
  std::vector<BlockQ8_1> a(8);
  ReferenceOps(TensorType::kQ8_1)->quantize_row(x.data(), a.data(), 256);
  for (const BlockQ8_1& b : a) {
    int sum = 0, amax = 0;
    for (int8_t q : b.qs) {
      sum += q;
      amax = std::max(amax, std::abs(static_cast<int>(q)));
    }
    EXPECT_EQ(amax, 127);
    EXPECT_EQ(b.s, Fp32ToFp16(Fp16ToFp32(b.d) * static_cast<float>(sum)));
  }
  BlockQ8_K k;
  ReferenceOps(TensorType::kQ8_K)->quantize_row(x.data(), &k, 256);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  EXPECT_FLOAT_EQ(k.d, amax / 127);
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int e = 16 * j; e < 16 * j + 16; ++e) sum += k.qs[e];
    EXPECT_EQ(k.bsums[j], sum);
  }
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

std::vector<uint8_t> QuantizeAs(TensorType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(RowBytes(t, static_cast<int64_t>(x.size())));
  ReferenceOps(t)->quantize_row(x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

std::vector<float> DequantizeAs(TensorType t, const std::vector<uint8_t>& q, size_t n) {
  std::vector<float> y(n);
  ReferenceOps(t)->dequantize_row(q.data(), y.data(), static_cast<int64_t>(n));
  return y;
}

TEST(VecDotTest, AgreesWithDequantizedDotProduct) {
  const size_t n = 256 * 16;
  for (const Bound& b : kBounds) {
    const TypeOps* ops = ReferenceOps(b.type);
    if (ops->vec_dot == nullptr) continue;
    const char* name = gguf::TensorTypeName(b.type).data();
    double worst = 0;
    for (uint32_t seed = 10; seed < 14; ++seed) {
      std::vector<float> w = Gaussian(n, seed), x = Gaussian(n, seed + 100);
      for (float& v : x) v += 0.3f;  // a non-zero mean exercises the min/sum terms
      const std::vector<uint8_t> qw = QuantizeAs(b.type, w);
      const std::vector<float> wd = DequantizeAs(b.type, qw, n);
      const std::vector<uint8_t> qx = QuantizeAs(ops->act_type, x);
      const std::vector<float> xd = DequantizeAs(ops->act_type, qx, n);
      const float got = ops->vec_dot(static_cast<int64_t>(n), qw.data(), qx.data());
      // The integer arithmetic computes exactly dot(dequantize(w), dequantize(a)), up to float
      // rounding of the per-block partial sums.
      const double exact_q = Dot(wd, xd);
      const double norm = std::sqrt(Dot(wd, wd) * Dot(x, x));
      // Q8_1 stores s = d*sum(qs) as fp16; the m*s term carries that rounding (half an fp16 ulp).
      double s_rounding = 0;
      if (ops->act_type == TensorType::kQ8_1) {
        const size_t wb = gguf::TensorTypeTraits(b.type).type_size;
        for (size_t i = 0; i < n / kQK; ++i) {
          uint16_t m;  // Q4_1 and Q5_1 both keep m right after d
          std::memcpy(&m, &qw[i * wb + 2], sizeof(m));
          const BlockQ8_1* a = reinterpret_cast<const BlockQ8_1*>(qx.data()) + i;
          s_rounding += std::fabs(Fp16ToFp32(m) * Fp16ToFp32(a->s)) * std::ldexp(1.0, -11);
        }
      }
      EXPECT_NEAR(got, exact_q, 2e-6 * norm + s_rounding) << name;
      // Against the unquantized activations the error is that of the activation format.
      EXPECT_NEAR(got, Dot(wd, x), b.vec_dot * norm) << name;
      worst = std::max(worst, std::fabs(got - Dot(wd, x)) / norm);
    }
    std::printf("vec_dot %-5s worst |err| / (|w||x|) = %.2e (bound %.0e)\n", name, worst,
                b.vec_dot);
  }
}

}  // namespace
}  // namespace tandem::quant
