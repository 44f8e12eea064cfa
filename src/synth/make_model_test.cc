#include "synth/make_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <vector>

#include "gguf/reader.h"
#include "gguf/summary.h"
#include "quant/quant.h"

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
  EXPECT_FALSE(ParseFileType("q4_K").has_value());  // only the llama.cpp mixes of K types
  EXPECT_FALSE(ParseFileType("iq2_xxs").has_value());
  EXPECT_FALSE(ParseFileType("").has_value());
  EXPECT_EQ(ParseFileType("Q4_K_M"), FileType::kQ4_K_M);
  EXPECT_EQ(ParseFileType("q4_k_m"), FileType::kQ4_K_M);
  EXPECT_EQ(ParseFileType("BF16"), FileType::kBF16);
  EXPECT_EQ(ParseFileType("q6_k"), FileType::kQ6_K);
  for (const char* name : {"f32", "f16", "bf16", "q8_0", "q4_0", "q6_K", "q4_K_M"}) {
    ASSERT_TRUE(ParseFileType(name).has_value()) << name;
    EXPECT_EQ(FileTypeName(*ParseFileType(name)), name);
    EXPECT_NE(FileTypeNames().find(name), std::string::npos);
  }
}

// llama.cpp's general.file_type numbers (llama_ftype).
TEST(MakeModelTest, FileTypeNumbers) {
  EXPECT_EQ(static_cast<uint32_t>(FileType::kF32), 0u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::kF16), 1u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::kQ4_0), 2u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::kQ8_0), 7u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::kQ4_K_M), 15u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::kQ6_K), 18u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::kBF16), 32u);
}

TEST(MakeModelTest, Q4KMUsesMoreBitsWhereLlamaCppDoes) {
  using gguf::TensorType;
  // 22 layers (tinyllama): n/8 = 2, 7n/8 = 19: layers 0, 1, 4, 7, 10, 13, 16, 19, 20, 21.
  std::vector<uint32_t> more;
  for (uint32_t i = 0; i < 22; ++i) {
    if (TensorTypeFor(FileType::kQ4_K_M, "blk." + std::to_string(i) + ".ffn_down.weight", i, 22,
                      5632, false) == TensorType::kQ6_K) {
      more.push_back(i);
    }
    EXPECT_EQ(TensorTypeFor(FileType::kQ4_K_M, "blk.x.attn_v.weight", i, 22, 2048, false),
              TensorTypeFor(FileType::kQ4_K_M, "blk.x.ffn_down.weight", i, 22, 5632, false));
    EXPECT_EQ(TensorTypeFor(FileType::kQ4_K_M, "blk.x.attn_q.weight", i, 22, 2048, false),
              TensorType::kQ4_K);
  }
  EXPECT_EQ(more, (std::vector<uint32_t>{0, 1, 4, 7, 10, 13, 16, 19, 20, 21}));
  EXPECT_EQ(TensorTypeFor(FileType::kQ4_K_M, "output.weight", 0, 22, 2048, false),
            TensorType::kQ6_K);
  EXPECT_EQ(TensorTypeFor(FileType::kQ4_K_M, "token_embd.weight", 0, 22, 2048, false),
            TensorType::kQ4_K);
  // Tied output: token_embd is the output. Rows of 896 are not a multiple of 256: fallbacks.
  EXPECT_EQ(TensorTypeFor(FileType::kQ4_K_M, "token_embd.weight", 0, 24, 896, true),
            TensorType::kQ8_0);
  EXPECT_EQ(TensorTypeFor(FileType::kQ4_K_M, "blk.3.attn_q.weight", 3, 24, 896, true),
            TensorType::kQ5_0);
  EXPECT_EQ(TensorTypeFor(FileType::kQ4_K_M, "blk.3.ffn_down.weight", 3, 24, 4864, true),
            TensorType::kQ4_K);
  // Legacy quantized files: the output in Q6_K as llama.cpp writes it, except in Q8_0 files.
  EXPECT_EQ(TensorTypeFor(FileType::kQ4_0, "output.weight", 0, 4, 256, false), TensorType::kQ6_K);
  EXPECT_EQ(TensorTypeFor(FileType::kQ4_0, "token_embd.weight", 0, 4, 256, false),
            TensorType::kQ4_0);
  EXPECT_EQ(TensorTypeFor(FileType::kQ8_0, "output.weight", 0, 4, 256, false), TensorType::kQ8_0);
  EXPECT_EQ(TensorTypeFor(FileType::kF16, "output.weight", 0, 4, 256, false), TensorType::kF16);
  EXPECT_EQ(TensorTypeFor(FileType::kQ6_K, "blk.0.attn_q.weight", 0, 4, 256, false),
            TensorType::kQ6_K);
}

// The tiny q4_K_M model has llama.cpp's tensor types name for name, and every quantized type
// holds the f32 model's weights within that type's error.
TEST(MakeModelTest, QuantizedTypesHoldTheF32Weights) {
  const ModelShape tiny = *FindShape("tiny");
  std::vector<uint8_t> f32_bytes = BuildModel({tiny}).value().WriteToBuffer().value();
  gguf::GgufFile f32 = gguf::GgufFile::Parse(f32_bytes).value();
  struct Case {
    FileType type;
    uint32_t file_type;
    double bound;  // relative RMS error of every weight matrix (uniform data)
  };
  for (const Case& c : {Case{FileType::kF16, 1, 3e-4}, Case{FileType::kBF16, 32, 2.5e-3},
                        Case{FileType::kQ8_0, 7, 5e-3}, Case{FileType::kQ4_0, 2, 8e-2},
                        Case{FileType::kQ6_K, 18, 1.6e-2}, Case{FileType::kQ4_K_M, 15, 8e-2}}) {
    SCOPED_TRACE(std::string(FileTypeName(c.type)));
    MakeModelOptions o{tiny, c.type};
    std::vector<uint8_t> bytes = BuildModel(o).value().WriteToBuffer().value();
    EXPECT_EQ(bytes, BuildModel(o).value().WriteToBuffer().value());  // deterministic
    Result<gguf::GgufFile> f = gguf::GgufFile::Parse(bytes);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->GetUint32("general.file_type").value(), c.file_type);
    std::map<gguf::TensorType, int> counts;
    for (const gguf::TensorInfo& t : f->tensors()) {
      ++counts[t.type];
      const gguf::TensorInfo* ref = f32.FindTensor(t.name);
      ASSERT_NE(ref, nullptr);
      std::vector<float> want(ref->n_elements), got(t.n_elements);
      ASSERT_EQ(want.size(), got.size());
      quant::ReferenceOps(ref->type)->dequantize_row(ref->data, want.data(), want.size());
      quant::ReferenceOps(t.type)->dequantize_row(t.data, got.data(), got.size());
      double err = 0, sig = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        err += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
        sig += want[i] * static_cast<double>(want[i]);
      }
      const double rel = std::sqrt(err / sig);
      if (t.type == gguf::TensorType::kF32) {
        EXPECT_EQ(rel, 0.0) << t.name;
      } else {
        EXPECT_LE(rel, c.bound) << t.name << " " << gguf::TensorTypeName(t.type);
        EXPECT_GT(rel, 0.0) << t.name;
      }
    }
    EXPECT_EQ(counts[gguf::TensorType::kF32], 9);
    if (c.type == FileType::kQ4_K_M) {
      EXPECT_EQ(counts[gguf::TensorType::kQ4_K], 25);
      EXPECT_EQ(counts[gguf::TensorType::kQ6_K], 5);
      // Name for name as llama.cpp's own Q4_K_M file of the same shape.
      const auto ref_path =
          std::filesystem::path(TANDEM_SHARED_DIR) / "reference/models/tiny-q4_k_m.gguf";
      if (std::filesystem::exists(ref_path)) {
        gguf::GgufFile ref = gguf::GgufFile::Open(ref_path.string()).value();
        ASSERT_EQ(ref.tensors().size(), f->tensors().size());
        for (const gguf::TensorInfo& t : ref.tensors()) {
          ASSERT_NE(f->FindTensor(t.name), nullptr) << t.name;
          EXPECT_EQ(f->FindTensor(t.name)->type, t.type) << t.name;
        }
      } else {
        std::printf("(%s absent: llama.cpp comparison skipped)\n", ref_path.c_str());
      }
    }
  }
}

}  // namespace
}  // namespace tandem::synth
