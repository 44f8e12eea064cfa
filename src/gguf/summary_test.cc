#include "gguf/summary.h"

#include <gtest/gtest.h>

#include "gguf/writer.h"

namespace tandem::gguf {
namespace {

TEST(SummaryTest, LayerOfTensor) {
  EXPECT_EQ(LayerOfTensor("blk.12.attn_q.weight"), 12u);
  EXPECT_EQ(LayerOfTensor("blk.0.x"), 0u);
  EXPECT_FALSE(LayerOfTensor("blk.x.attn"));
  EXPECT_FALSE(LayerOfTensor("blk.3"));
  EXPECT_FALSE(LayerOfTensor("blk."));
  EXPECT_FALSE(LayerOfTensor("token_embd.weight"));
  EXPECT_FALSE(LayerOfTensor("blk.99999999999999999999999.x"));
}

TEST(SummaryTest, HyperparametersAndBytes) {
  GgufWriter w;
  w.Set("general.architecture", "qwen2");
  w.Set("qwen2.block_count", uint32_t{2});
  w.Set("qwen2.embedding_length", uint32_t{64});
  w.Set("qwen2.attention.head_count", uint32_t{4});
  w.Set("qwen2.rope.freq_base", 1e6f);
  w.Set("tokenizer.ggml.tokens", Array::Of(std::vector<std::string>{"a", "b", "c"}));
  ASSERT_TRUE(w.AddTensor("token_embd.weight", TensorType::kF32, {64, 3},
                          std::vector<uint8_t>(64 * 3 * 4)).ok());
  ASSERT_TRUE(w.AddTensor("blk.0.w", TensorType::kQ8_0, {64, 2}, std::vector<uint8_t>(136)).ok());
  ASSERT_TRUE(w.AddTensor("blk.1.w", TensorType::kQ8_0, {64, 2}, std::vector<uint8_t>(136)).ok());
  ASSERT_TRUE(w.AddTensor("blk.1.n", TensorType::kF32, {64}, std::vector<uint8_t>(256)).ok());
  std::vector<uint8_t> b = w.WriteToBuffer().value();
  Result<GgufFile> f = GgufFile::Parse(b);
  ASSERT_TRUE(f.ok());
  ModelSummary s = Summarize(*f);
  EXPECT_EQ(s.architecture, "qwen2");
  EXPECT_EQ(s.n_layer, 2u);
  EXPECT_EQ(s.head_dim, 16u);     // derived from embedding / heads
  EXPECT_EQ(s.n_head_kv, 4u);     // defaults to the head count
  EXPECT_EQ(s.n_vocab, 3u);       // from the token list
  EXPECT_FALSE(s.n_ctx.has_value());
  EXPECT_DOUBLE_EQ(*s.rope_freq_base, 1e6);
  EXPECT_EQ(s.n_params, 64u * 3 + 128 + 128 + 64);
  ASSERT_EQ(s.by_type.size(), 2u);
  EXPECT_EQ(s.by_type[0].type, TensorType::kF32);
  EXPECT_EQ(s.by_type[0].tensors, 2u);
  EXPECT_EQ(s.by_type[1].type, TensorType::kQ8_0);
  EXPECT_EQ(s.by_type[1].bytes, 272u);
  EXPECT_EQ(s.layer_bytes.at(0), 136u);
  EXPECT_EQ(s.layer_bytes.at(1), 136u + 256u);
  EXPECT_EQ(s.non_layer_bytes, 768u);
  EXPECT_EQ(s.non_layer_tensors, std::vector<std::string>{"token_embd.weight"});
}

}  // namespace
}  // namespace tandem::gguf
