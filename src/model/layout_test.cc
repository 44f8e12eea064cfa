// Layout: tensor parts by name, a stage's tensors, and KV cache bytes against what KvCache holds.
#include "model/layout.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "model/kv_cache.h"
#include "model/model.h"

namespace tandem::model {
namespace {

TEST(LayoutTest, PartsByName) {
  int64_t layer = 0;
  EXPECT_EQ(PartOf("blk.0.attn_q.weight", &layer), TensorPart::kLayer);
  EXPECT_EQ(layer, 0);
  EXPECT_EQ(PartOf("blk.117.ffn_down.weight", &layer), TensorPart::kLayer);
  EXPECT_EQ(layer, 117);
  EXPECT_EQ(PartOf("token_embd.weight", &layer), TensorPart::kEmbedding);
  EXPECT_EQ(layer, -1);
  EXPECT_EQ(PartOf("output.weight", &layer), TensorPart::kHead);
  EXPECT_EQ(PartOf("output_norm.weight", &layer), TensorPart::kHead);
  EXPECT_EQ(PartOf("rope_freqs.weight", &layer), TensorPart::kShared);
  for (const char* odd : {"blk.", "blk.x.w", "blk.-1.w", "blk.3", "blk.3x.w", "blkk.3.w"}) {
    EXPECT_EQ(PartOf(odd, &layer), TensorPart::kShared) << odd;
    EXPECT_EQ(layer, -1) << odd;
  }
}

TEST(LayoutTest, StagesPartitionTheLayersAndTheLastHoldsTheHead) {
  const auto path = std::filesystem::path(TANDEM_SHARED_DIR) / "reference/models/tiny-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared reference model at " << path;
  Result<gguf::GgufFile> f = gguf::GgufFile::Open(path.string());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  Result<ModelParams> p = ReadParams(*f);
  ASSERT_TRUE(p.ok());
  const int64_t n = p->n_layer, k = n / 2;
  const StageTensors all = TensorsOfStage(*f, 0, n, true, true);
  const StageTensors a = TensorsOfStage(*f, 0, k, true, false);
  const StageTensors b = TensorsOfStage(*f, k, n, false, true);
  uint64_t file_bytes = 0;
  for (const gguf::TensorInfo& t : f->tensors()) file_bytes += t.n_bytes;
  EXPECT_EQ(all.bytes, file_bytes);  // one stage holds everything
  EXPECT_EQ(all.tensors.size(), f->tensors().size());
  auto has = [](const StageTensors& s, const char* name) {
    for (const gguf::TensorInfo* t : s.tensors) {
      if (t->name == name) return true;
    }
    return false;
  };
  EXPECT_TRUE(has(a, "token_embd.weight"));
  EXPECT_FALSE(has(a, "output_norm.weight"));
  EXPECT_TRUE(has(b, "output_norm.weight"));
  EXPECT_EQ(has(b, "token_embd.weight"), HeadIsTied(*f));  // the tied head reads the table
  EXPECT_TRUE(has(a, "blk.0.attn_q.weight"));
  EXPECT_FALSE(has(b, "blk.0.attn_q.weight"));
  // Every layer tensor is in exactly one of the two stages.
  for (const gguf::TensorInfo& t : f->tensors()) {
    int64_t layer = -1;
    if (PartOf(t.name, &layer) == TensorPart::kLayer) {
      EXPECT_NE(has(a, t.name.c_str()), has(b, t.name.c_str())) << t.name;
    }
  }
}

TEST(LayoutTest, KvCacheBytesAreWhatTheCacheHolds) {
  ModelParams p;
  p.n_layer = 3;
  p.n_head = 8;
  p.n_head_kv = 2;
  p.head_dim = 64;
  for (auto [tk, tv] : {std::pair{quant::TensorType::kF16, quant::TensorType::kF16},
                        std::pair{quant::TensorType::kQ8_0, quant::TensorType::kQ8_0},
                        std::pair{quant::TensorType::kQ8_0, quant::TensorType::kF16}}) {
    KvCache c(p.n_layer, 100, p.n_head_kv, p.head_dim, tk, tv);
    EXPECT_EQ(KvCacheBytes(p, 100, 0, p.n_layer, tk, tv), c.bytes());
    EXPECT_EQ(c.bytes(), (c.k_row_bytes() + c.v_row_bytes()) * p.n_head_kv * 100 * p.n_layer);
  }
  // Q8_0 keeps 34 bytes per 32 values against F16's 64: the plan must not count it as F16.
  EXPECT_EQ(KvCacheBytes(p, 100, 0, 1, quant::TensorType::kQ8_0, quant::TensorType::kQ8_0) * 64,
            KvCacheBytes(p, 100, 0, 1, quant::TensorType::kF16, quant::TensorType::kF16) * 34);
}

// Gemma 3's pattern: 5 local layers of 6. With a long context the local layers hold their window
// (plus the rollback margin and a batch), so the cache is mostly the global layers'.
TEST(LayoutTest, SlidingWindowLayersCountOnlyTheirWindow) {
  ModelParams p;
  p.n_layer = 12;
  p.n_head = 8;
  p.n_head_kv = 4;
  p.head_dim = 128;
  p.n_swa = 1024;
  p.swa_period = 6;
  const int64_t n_ctx = 32768, window = p.n_swa + kWindowRollback + kWindowBatch;
  ASSERT_EQ(WindowCells(p, n_ctx), window);
  EXPECT_EQ(WindowCells(p, 1000), 1000);
  const uint64_t row = 2 * quant::RowBytes(quant::TensorType::kF16, p.kv_dim());
  EXPECT_EQ(KvCacheBytes(p, n_ctx, 0, 12, quant::TensorType::kF16, quant::TensorType::kF16),
            row * (2 * n_ctx + 10 * window));
  EXPECT_EQ(KvCacheBytes(p, n_ctx, 5, 6, quant::TensorType::kF16, quant::TensorType::kF16), row * n_ctx);
  EXPECT_EQ(KvCacheBytes(p, n_ctx, 6, 8, quant::TensorType::kF16, quant::TensorType::kF16), row * 2 * window);
  for (auto [begin, end] : {std::pair{0, 12}, std::pair{3, 7}, std::pair{5, 6}}) {
    std::vector<bool> local;
    for (int64_t il = begin; il < end; ++il) local.push_back(p.IsLocalLayer(il));
    KvCache c(end - begin, n_ctx, p.n_head_kv, p.head_dim, quant::TensorType::kQ8_0, quant::TensorType::kF16, local, p.n_swa,
              WindowCells(p, n_ctx));
    EXPECT_EQ(KvCacheBytes(p, n_ctx, begin, end, quant::TensorType::kQ8_0, quant::TensorType::kF16), c.bytes())
        << begin << ".." << end;
  }
}

}  // namespace
}  // namespace tandem::model
