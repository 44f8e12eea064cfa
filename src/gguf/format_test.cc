#include "gguf/format.h"

#include <gtest/gtest.h>

namespace tandem::gguf {
namespace {

TEST(FormatTest, TensorTypeTableIsConsistent) {
  int known = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    std::optional<TensorTypeInfo> t = LookupTensorType(id);
    if (!t) continue;
    ++known;
    EXPECT_EQ(static_cast<uint32_t>(t->type), id);
    EXPECT_EQ(TensorTypeTraits(t->type).name, t->name);
    EXPECT_EQ(ParseTensorType(t->name), t->type);
    EXPECT_GT(t->block_size, 0u);
    EXPECT_GT(t->type_size, 0u);
  }
  EXPECT_EQ(known, 32);
  EXPECT_FALSE(LookupTensorType(4).has_value());  // retired Q4_2
}

TEST(FormatTest, BlockLayoutsOfCommonTypes) {
  // Bytes per block from the GGUF block layouts (d/dmin halves, scales, quants).
  EXPECT_EQ(TensorTypeTraits(TensorType::kQ4_0).type_size, 2u + 16);
  EXPECT_EQ(TensorTypeTraits(TensorType::kQ8_0).type_size, 2u + 32);
  EXPECT_EQ(TensorTypeTraits(TensorType::kQ4_K).type_size, 2u + 2 + 12 + 128);
  EXPECT_EQ(TensorTypeTraits(TensorType::kQ6_K).type_size, 128u + 64 + 16 + 2);
  EXPECT_EQ(TensorTypeTraits(TensorType::kQ2_K).type_size, 16u + 64 + 2 + 2);
  EXPECT_EQ(TensorTypeTraits(TensorType::kQ3_K).type_size, 32u + 64 + 12 + 2);
  EXPECT_EQ(TensorTypeTraits(TensorType::kQ5_K).type_size, 2u + 2 + 12 + 32 + 128);
  EXPECT_EQ(ParseTensorType("Q4_K"), TensorType::kQ4_K);
  EXPECT_EQ(ParseTensorType("BF16"), TensorType::kBF16);
  EXPECT_FALSE(ParseTensorType("q4_k_m").has_value());
}

TEST(FormatTest, ValueTypeSizes) {
  EXPECT_EQ(ValueTypeSize(ValueType::kBool), 1u);
  EXPECT_EQ(ValueTypeSize(ValueType::kFloat64), 8u);
  EXPECT_EQ(ValueTypeSize(ValueType::kString), 0u);
  EXPECT_EQ(ValueTypeName(ValueType::kArray), "array");
}

}  // namespace
}  // namespace tandem::gguf
