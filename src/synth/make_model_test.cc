#include "synth/make_model.h"

#include <gtest/gtest.h>

#include "gguf/reader.h"
#include "gguf/summary.h"

namespace tandem::synth {
namespace {

TEST(MakeModelTest, TinyShapeHasExpectedTensorsAndIsDeterministic) {
  MakeModelOptions o{*FindShape("tiny")};
  Result<gguf::GgufWriter> w = BuildModel(o);
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> a = w->WriteToBuffer().value();
  std::vector<uint8_t> b = BuildModel(o).value().WriteToBuffer().value();
  EXPECT_EQ(a, b);
  o.seed = 7;
  EXPECT_NE(BuildModel(o).value().WriteToBuffer().value(), a);

  Result<gguf::GgufFile> f = gguf::GgufFile::Parse(a);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  gguf::ModelSummary s = gguf::Summarize(*f);
  EXPECT_EQ(s.architecture, "llama");
  EXPECT_EQ(s.n_layer, 4u);
  EXPECT_EQ(s.n_embd, 256u);
  EXPECT_EQ(s.n_head_kv, 4u);
  EXPECT_EQ(s.layer_bytes.size(), 4u);
  EXPECT_EQ(f->tensors().size(), 1u + 4 * 9 + 2);
  const gguf::TensorInfo* q = f->FindTensor("blk.0.attn_k.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->ne[0], 256u);
  EXPECT_EQ(q->ne[1], 128u);
  // Weights are bounded by 1/sqrt(fan_in) and not all equal.
  const float* v = reinterpret_cast<const float*>(q->data);
  float lo = 1, hi = -1;
  for (uint64_t i = 0; i < q->n_elements; ++i) {
    lo = std::min(lo, v[i]);
    hi = std::max(hi, v[i]);
  }
  EXPECT_GE(lo, -1.0f / 16);
  EXPECT_LE(hi, 1.0f / 16);
  EXPECT_LT(lo, -0.05f);
  EXPECT_GT(hi, 0.05f);
}

TEST(MakeModelTest, QwenShapesGetBiasesAndTiedOutput) {
  Result<gguf::GgufWriter> w = BuildModel({*FindShape("qwen2.5-0.5b")});
  ASSERT_TRUE(w.ok());
  // 0.5B parameters: check the plan without writing the file.
  EXPECT_GT(w->tensor_bytes(), 400'000'000ull * 4);
  EXPECT_LT(w->tensor_bytes(), 700'000'000ull * 4);
}

TEST(MakeModelTest, UnknownShapeAndUnsupportedType) {
  EXPECT_FALSE(FindShape("gpt-5").has_value());
  EXPECT_NE(ShapeNames().find("tinyllama-1.1b"), std::string::npos);
  MakeModelOptions o{*FindShape("tiny")};
  o.type = gguf::TensorType::kQ4_K;
  EXPECT_EQ(BuildModel(o).status().code(), Code::kUnsupported);
}

}  // namespace
}  // namespace tandem::synth
