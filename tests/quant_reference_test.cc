// Golden files for src/quant: every quantized tensor of the llama reference models in ../shared
// (written by llama.cpp's quantizer from the same weights as tiny-f16.gguf) must dequantize to
// within its type's expected error of the f16 tensor. A layout that were off by one bit anywhere
// (element order, scale packing, high bits) would give errors of the order of the data itself,
// so passing these bounds shows the block layouts match GGUF bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "quant/quant.h"
#include "test_support.h"

namespace tandem {
namespace {

using gguf::GgufFile;
using gguf::TensorInfo;
using gguf::TensorType;
using testing::SharedDir;

// The whole tensor as floats, row by row through the reference dequantizer.
std::vector<float> Dequantize(const TensorInfo& t) {
  const quant::TypeOps* ops = quant::ReferenceOps(t.type);
  EXPECT_NE(ops, nullptr) << t.name << " has unsupported type " << gguf::TensorTypeName(t.type);
  if (ops == nullptr) return {};
  const int64_t row = static_cast<int64_t>(t.ne[0]);
  const uint64_t rows = t.n_elements / t.ne[0];
  const uint64_t row_bytes = quant::RowBytes(t.type, row);
  EXPECT_EQ(row_bytes * rows, t.n_bytes) << t.name;
  std::vector<float> out(t.n_elements);
  for (uint64_t r = 0; r < rows; ++r) {
    ops->dequantize_row(t.data + r * row_bytes, out.data() + r * t.ne[0], row);
  }
  return out;
}

double RelativeRms(const std::vector<float>& ref, const std::vector<float>& got) {
  double err = 0, sig = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    err += d * d;
    sig += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(err / sig);
}

// Relative RMS error bound of a tensor of this type against the f16 original. The measured
// worst cases are printed by the test; bounds sit about 15% above them.
double ExpectedError(TensorType t) {
  switch (t) {
    case TensorType::kF32:
      return 0.0;
    case TensorType::kBF16:
      return 2.2e-3;
    case TensorType::kQ8_0:
      return 6.5e-3;
    case TensorType::kQ6_K:
      return 2.1e-2;
    case TensorType::kQ5_1:
      return 4.0e-2;
    case TensorType::kQ5_0:
      return 5.0e-2;
    case TensorType::kQ5_K:
      return 4.3e-2;
    case TensorType::kQ4_1:
      return 8.5e-2;
    case TensorType::kQ4_0:
      return 1.0e-1;
    case TensorType::kQ4_K:
      return 8.5e-2;
    case TensorType::kQ3_K:
      return 1.7e-1;
    case TensorType::kQ2_K:
      return 3.2e-1;
    default:
      return -1;  // not expected in these files
  }
}

class QuantGoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantGoldenTest, EveryTensorDequantizesCloseToTheF16Original) {
  const auto dir = SharedDir() / "reference/models";
  const auto path = dir / (std::string("tiny-") + GetParam() + ".gguf");
  TANDEM_REQUIRE_SHARED(path);
  TANDEM_REQUIRE_SHARED(dir / "tiny-f16.gguf");
  Result<GgufFile> f16 = GgufFile::Open((dir / "tiny-f16.gguf").string());
  Result<GgufFile> q = GgufFile::Open(path.string());
  ASSERT_TRUE(f16.ok()) << f16.status().ToString();
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_EQ(q->tensors().size(), f16->tensors().size());

  std::map<TensorType, double> worst, worst_mine;
  int quantized = 0;
  for (const TensorInfo& t : q->tensors()) {
    SCOPED_TRACE(t.name);
    const TensorInfo* ref = f16->FindTensor(t.name);
    ASSERT_NE(ref, nullptr);
    ASSERT_EQ(ref->n_elements, t.n_elements);
    ASSERT_EQ(ref->ne, t.ne);
    const std::vector<float> want = Dequantize(*ref);
    const std::vector<float> got = Dequantize(t);
    ASSERT_EQ(got.size(), want.size());
    const double e = RelativeRms(want, got);
    const double bound = ExpectedError(t.type);
    ASSERT_GE(bound, 0) << "unexpected type " << gguf::TensorTypeName(t.type);
    EXPECT_LE(e, bound) << gguf::TensorTypeName(t.type);
    worst[t.type] = std::max(worst[t.type], e);
    quantized += t.type != ref->type;

    // tandem's own quantizer on the same weights meets the same bound.
    const quant::TypeOps* ops = quant::ReferenceOps(t.type);
    std::vector<uint8_t> mine(t.n_bytes);
    std::vector<float> back(want.size());
    ops->quantize_row(want.data(), mine.data(), static_cast<int64_t>(want.size()));
    ops->dequantize_row(mine.data(), back.data(), static_cast<int64_t>(want.size()));
    const double e_mine = RelativeRms(want, back);
    EXPECT_LE(e_mine, bound) << "tandem quantizer, " << gguf::TensorTypeName(t.type);
    worst_mine[t.type] = std::max(worst_mine[t.type], e_mine);
  }
  EXPECT_GE(quantized, 25) << "expected most tensors to be stored in a quantized type";
  for (const auto& [type, e] : worst) {
    std::printf(
        "tiny-%-7s %-5s worst relative RMS error vs f16: file %.5f, tandem's quantizer %.5f "
        "(bound %.5f)\n",
        GetParam(), std::string(gguf::TensorTypeName(type)).c_str(), e, worst_mine[type],
        ExpectedError(type));
  }
}

INSTANTIATE_TEST_SUITE_P(Llama, QuantGoldenTest,
                         ::testing::Values("q2_k", "q3_k_m", "q4_0", "q4_1", "q4_k_m", "q5_0",
                                           "q5_1", "q5_k_m", "q6_k", "q8_0", "bf16"));

// Requantizing the dequantized values of a llama.cpp Q8_0 / Q4_0 file with tandem's quantizer
// gives back the file's blocks: both start from the absmax scale (the largest magnitude maps to
// 127, resp. to -8), and tandem's search tries that scale first and keeps it when it is exact.
TEST(QuantRequantizeTest, Q8_0AndQ4_0FileBlocksAreReproduced) {
  const auto dir = SharedDir() / "reference/models";
  for (const char* name : {"tiny-q8_0.gguf", "tiny-q4_0.gguf"}) {
    SCOPED_TRACE(name);
    TANDEM_REQUIRE_SHARED(dir / name);
    Result<GgufFile> q = GgufFile::Open((dir / name).string());
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    uint64_t blocks = 0, same = 0, same_values = 0;
    for (const TensorInfo& t : q->tensors()) {
      if (t.type != TensorType::kQ8_0 && t.type != TensorType::kQ4_0) continue;
      const quant::TypeOps* ops = quant::ReferenceOps(t.type);
      const std::vector<float> x = Dequantize(t);
      std::vector<uint8_t> again(t.n_bytes);
      ops->quantize_row(x.data(), again.data(), static_cast<int64_t>(t.n_elements));
      const uint32_t bb = gguf::TensorTypeTraits(t.type).type_size;
      std::vector<float> y(x.size());
      ops->dequantize_row(again.data(), y.data(), static_cast<int64_t>(t.n_elements));
      for (uint64_t i = 0; i < t.n_bytes / bb; ++i) {
        ++blocks;
        same += std::memcmp(t.data + i * bb, again.data() + i * bb, bb) == 0;
        same_values += std::equal(x.begin() + i * 32, x.begin() + (i + 1) * 32, y.begin() + i * 32);
      }
    }
    std::printf("%s: %llu of %llu blocks reproduced byte for byte, %llu with the same values\n",
                name, static_cast<unsigned long long>(same),
                static_cast<unsigned long long>(blocks),
                static_cast<unsigned long long>(same_values));
    ASSERT_GT(blocks, 1000u);
    EXPECT_EQ(same_values, blocks);
    EXPECT_EQ(same, blocks);
  }
}

}  // namespace
}  // namespace tandem
