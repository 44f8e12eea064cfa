// Reads every GGUF file in ../shared (reference models and tokenizer vocabularies) and checks
// known values; every prefix of stories260K.gguf must be rejected.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "gguf/reader.h"
#include "gguf/summary.h"
#include "test_support.h"

namespace tandem {
namespace {

using gguf::GgufFile;
using gguf::TensorType;
using testing::SharedDir;
using testing::SharedFiles;

std::vector<uint8_t> ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(GgufReferenceTest, EveryReferenceModelReads) {
  TANDEM_REQUIRE_SHARED(SharedDir() / "reference/models");
  std::vector<std::filesystem::path> files = SharedFiles("reference/models", ".gguf");
  ASSERT_GE(files.size(), 20u);
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    Result<GgufFile> f = GgufFile::Open(p.string());
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    gguf::ModelSummary s = gguf::Summarize(*f);
    // The reader reads every family in the reference set, whether or not the engine runs it.
    EXPECT_TRUE(s.architecture == "llama" || s.architecture == "qwen2" || s.architecture == "qwen3" ||
                s.architecture == "gemma3" || s.architecture == "qwen3moe")
        << s.architecture;
    ASSERT_TRUE(s.n_layer.has_value());
    EXPECT_EQ(s.layer_bytes.size(), *s.n_layer);
    EXPECT_EQ(s.n_vocab, 512u);
    // Every tensor lies inside the file and data pointers are where the offsets say.
    for (const gguf::TensorInfo& t : f->tensors()) {
      EXPECT_LE(t.file_offset + t.n_bytes, f->file_size());
      EXPECT_EQ(t.file_offset % f->alignment(), 0u);
    }
  }
}

TEST(GgufReferenceTest, Stories260KKnownValues) {
  const auto path = SharedDir() / "reference/models/stories260K.gguf";
  TANDEM_REQUIRE_SHARED(path);
  Result<GgufFile> f = GgufFile::Open(path.string());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  gguf::ModelSummary s = gguf::Summarize(*f);
  EXPECT_EQ(s.architecture, "llama");
  EXPECT_EQ(s.n_layer, 5u);
  EXPECT_EQ(s.n_embd, 64u);
  EXPECT_EQ(s.n_head, 8u);
  EXPECT_EQ(s.n_head_kv, 4u);
  EXPECT_EQ(s.head_dim, 8u);
  EXPECT_EQ(s.n_ctx, 512u);
  EXPECT_EQ(s.n_vocab, 512u);
  EXPECT_EQ(f->GetString("tokenizer.ggml.model").value(), "llama");
  const gguf::Array* tokens = f->GetArray("tokenizer.ggml.tokens").value();
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ(tokens->strings()[1], "<s>");
  EXPECT_EQ(f->GetArray("tokenizer.ggml.scores").value()->elem_type(), gguf::ValueType::kFloat32);
  const gguf::TensorInfo* emb = f->FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, TensorType::kF32);
  EXPECT_EQ(emb->ne[0], 64u);
  EXPECT_EQ(emb->ne[1], 512u);
  EXPECT_EQ(s.by_type.size(), 1u);
}

TEST(GgufReferenceTest, TinyQ4KMTypeMix) {
  const auto path = SharedDir() / "reference/models/tiny-q4_k_m.gguf";
  TANDEM_REQUIRE_SHARED(path);
  Result<GgufFile> f = GgufFile::Open(path.string());
  ASSERT_TRUE(f.ok());
  gguf::ModelSummary s = gguf::Summarize(*f);
  std::map<TensorType, uint64_t> count;
  for (const gguf::TypeTotal& t : s.by_type) count[t.type] = t.tensors;
  EXPECT_EQ(count[TensorType::kF32], 9u);
  EXPECT_EQ(count[TensorType::kQ4_K], 25u);
  EXPECT_EQ(count[TensorType::kQ6_K], 5u);
  EXPECT_EQ(s.n_embd, 256u);
  EXPECT_EQ(s.n_head_kv, 4u);
  EXPECT_EQ(s.layer_bytes.size(), 4u);
  EXPECT_EQ(f->GetUint32("general.file_type").value(), 15u);  // MOSTLY_Q4_K_M
}

TEST(GgufReferenceTest, QwenFilesHaveTheirArchitectureTensors) {
  const auto dir = SharedDir() / "reference/models";
  TANDEM_REQUIRE_SHARED(dir / "tiny-qwen2-f16.gguf");
  Result<GgufFile> q2 = GgufFile::Open((dir / "tiny-qwen2-f16.gguf").string());
  ASSERT_TRUE(q2.ok());
  EXPECT_NE(q2->FindTensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(gguf::Summarize(*q2).n_head_kv, 2u);
  Result<GgufFile> q3 = GgufFile::Open((dir / "tiny-qwen3-f16.gguf").string());
  ASSERT_TRUE(q3.ok());
  EXPECT_NE(q3->FindTensor("blk.0.attn_q_norm.weight"), nullptr);
}

TEST(GgufReferenceTest, EveryTokenizerVocabularyReads) {
  TANDEM_REQUIRE_SHARED(SharedDir() / "tokenizer");
  std::vector<std::filesystem::path> files = SharedFiles("tokenizer", ".gguf");
  ASSERT_GE(files.size(), 8u);
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    Result<GgufFile> f = GgufFile::Open(p.string());
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_TRUE(f->tensors().empty());
    Result<std::string> model = f->GetString("tokenizer.ggml.model");
    ASSERT_TRUE(model.ok());
    EXPECT_TRUE(*model == "llama" || *model == "gpt2") << *model;
    const gguf::Array* tokens = f->GetArray("tokenizer.ggml.tokens").value();
    EXPECT_GT(tokens->size(), 1000u);
    if (*model == "gpt2") {
      EXPECT_GT(f->GetArray("tokenizer.ggml.merges").value()->size(), 1000u);
      EXPECT_TRUE(f->GetString("tokenizer.ggml.pre").ok());
    }
  }
}

TEST(GgufReferenceTest, EveryPrefixOfStories260KIsRejected) {
  const auto path = SharedDir() / "reference/models/stories260K.gguf";
  TANDEM_REQUIRE_SHARED(path);
  std::vector<uint8_t> bytes = ReadAll(path);
  ASSERT_TRUE(GgufFile::Parse(bytes).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<GgufFile> f = GgufFile::Parse(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes was accepted";
    ASSERT_TRUE(f.status().code() == Code::kCorruption) << f.status().ToString();
  }
}

TEST(GgufReferenceTest, RandomByteFlipsNeverCrashTheReader) {
  TANDEM_REQUIRE_SHARED(SharedDir() / "reference/models");
  std::mt19937_64 rng(1234);
  size_t rejected = 0, runs = 0;
  for (const auto& p : SharedFiles("reference/models", ".gguf")) {
    const std::vector<uint8_t> original = ReadAll(p);
    Result<GgufFile> f = GgufFile::Parse(original);
    ASSERT_TRUE(f.ok());
    const size_t header = f->data_offset();  // flips in the header are the interesting ones
    for (int i = 0; i < 300; ++i) {
      std::vector<uint8_t> b = original;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) b[rng() % header] ^= static_cast<uint8_t>(1 + rng() % 255);
      Result<GgufFile> g = GgufFile::Parse(b);
      if (g.ok()) {
        gguf::Summarize(*g);  // a file that parses must summarise without trouble
      } else {
        ++rejected;
        EXPECT_FALSE(g.status().message().empty());
      }
      ++runs;
    }
  }
  // Most random header damage must be caught (string lengths, types, counts, offsets).
  EXPECT_GT(rejected, runs / 10);
}

}  // namespace
}  // namespace tandem
