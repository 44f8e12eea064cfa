// KvCache: cells per sequence and position, and the sliding-window pool that drops what no later
// token reaches (with the rollback margin), grows for several sequences, and refuses a batch
// that needs a dropped cell; WindowKeepsPrefix, the main node's rule, against the cache itself.
#include "model/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace tandem::model {
namespace {

constexpr int64_t kSwa = 16, kCtx = 1024;

ModelParams Windowed() {
  ModelParams p;
  p.n_layer = 2;
  p.n_head = 2;
  p.n_head_kv = 1;
  p.head_dim = 32;
  p.n_swa = kSwa;
  p.swa_period = 2;  // layer 0 local, layer 1 global
  return p;
}

KvCache Cache(const ModelParams& p) {
  return KvCache(p.n_layer, kCtx, p.n_head_kv, p.head_dim, quant::TensorType::kF16, quant::TensorType::kF16,
                 {p.IsLocalLayer(0), p.IsLocalLayer(1)}, p.n_swa, WindowCells(p, kCtx));
}

Status Add(KvCache& c, int32_t seq, int32_t pos, int64_t n = 1) {
  std::vector<int32_t> s(n, seq), ps(n);
  for (int64_t i = 0; i < n; ++i) ps[i] = pos + static_cast<int32_t>(i);
  std::vector<int64_t> cells(n), window(n);
  return c.Allocate(s.data(), ps.data(), n, cells.data(), window.data());
}

// The positions of `seq` in the window pool, ascending.
std::vector<int32_t> WindowPositions(const KvCache& c, int32_t seq) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < c.high_water(KvCache::kWindow); ++i) {
    if (c.seq_of(KvCache::kWindow, i) == seq) out.push_back(c.pos_of(KvCache::kWindow, i));
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(KvCacheTest, DecodingKeepsTheWindowAndTheMarginOnly) {
  const ModelParams p = Windowed();
  KvCache c = Cache(p);
  ASSERT_TRUE(c.has_window());
  EXPECT_EQ(c.pool_of(0), KvCache::kWindow);
  EXPECT_EQ(c.pool_of(1), KvCache::kFull);
  ASSERT_TRUE(Add(c, 0, 0, 100).ok());  // a prompt: every cell kept, the batch itself needs them
  EXPECT_EQ(c.used(KvCache::kWindow), 100);
  for (int32_t pos = 100; pos < 300; ++pos) ASSERT_TRUE(Add(c, 0, pos).ok()) << pos;
  EXPECT_EQ(c.used(), 300);
  // The last step (p0 = 299) kept 299 - 16 + 1 - 32 = 252 on.
  const std::vector<int32_t> kept = WindowPositions(c, 0);
  ASSERT_EQ(static_cast<int64_t>(kept.size()), kSwa + kWindowRollback);
  EXPECT_EQ(kept.front(), 299 - kSwa + 1 - kWindowRollback);
  EXPECT_EQ(kept.back(), 299);
  EXPECT_EQ(c.capacity(KvCache::kWindow), WindowCells(p, kCtx));
}

// For every truncation point: where the main node's rule says the prefix is kept, the cache
// continues from there; exactly one position further back it does not, and the cache refuses the
// batch (naming the positions) rather than computing without the dropped cells.
TEST(KvCacheTest, TheMainNodesRuleMatchesWhatTheCacheKeeps) {
  const ModelParams p = Windowed();
  const int64_t seen = 300;
  int64_t first_kept = -1;
  for (int64_t from = 1; from <= seen; ++from) {
    KvCache c = Cache(p);
    ASSERT_TRUE(Add(c, 0, 0, 64).ok());
    for (int32_t pos = 64; pos < seen; ++pos) ASSERT_TRUE(Add(c, 0, pos).ok());
    c.Truncate(0, static_cast<int32_t>(from));
    const Status st = Add(c, 0, static_cast<int32_t>(from));
    if (WindowKeepsPrefix(p, from, seen)) {
      EXPECT_TRUE(st.ok()) << "from " << from << ": " << st.ToString();
      if (first_kept < 0) first_kept = from;
    } else {
      EXPECT_FALSE(st.ok()) << "from " << from << ": the rule gives up where the cache could go on";
      EXPECT_NE(st.message().find("sequence 0 continues at position " + std::to_string(from)), std::string::npos)
          << st.ToString();
      EXPECT_EQ(c.used(), from) << "a refused batch claims no cell";
    }
  }
  EXPECT_EQ(first_kept, seen - 1 - kWindowRollback);
  // Truncated to 0 the sequence starts again, its dropped cells forgotten.
  KvCache c = Cache(p);
  for (int32_t pos = 0; pos < 200; ++pos) ASSERT_TRUE(Add(c, 3, pos).ok());
  c.Truncate(3, 0);
  EXPECT_EQ(c.used(), 0);
  EXPECT_TRUE(Add(c, 3, 0, 10).ok());
  // Without a window nothing is ever dropped.
  ModelParams dense = p;
  dense.n_swa = 0;
  EXPECT_TRUE(WindowKeepsPrefix(dense, 1, 100000));
  EXPECT_TRUE(WindowKeepsPrefix(p, 0, 100000));
  EXPECT_TRUE(WindowKeepsPrefix(p, 1, kSwa + kWindowRollback));
  EXPECT_FALSE(WindowKeepsPrefix(p, 1, kSwa + kWindowRollback + 1));
}

TEST(KvCacheTest, TheWindowPoolGrowsForManySequencesAndKeepsTheirRows) {
  ModelParams p = Windowed();
  p.n_head_kv = 2;  // each head's rows move with the growth
  p.n_head = 2;
  KvCache c = Cache(p);
  const int64_t start = c.capacity(KvCache::kWindow);
  // 12 sequences of 80 tokens each, interleaved one token per batch: their windows and margins
  // need 12 x 48 = 576 cells, more than one sequence's start; each row keeps what was written.
  constexpr int kSeqs = 12;
  for (int32_t pos = 0; pos < 80; ++pos) {
    std::vector<int32_t> seqs, positions;
    for (int32_t s = 0; s < kSeqs; ++s) seqs.push_back(s), positions.push_back(pos);
    std::vector<int64_t> cells(kSeqs), window(kSeqs);
    ASSERT_TRUE(c.Allocate(seqs.data(), positions.data(), kSeqs, cells.data(), window.data()).ok()) << pos;
    for (int s = 0; s < kSeqs; ++s) {
      for (int h = 0; h < 2; ++h) {
        uint8_t* row = c.k(0, window[s], h);
        row[0] = static_cast<uint8_t>(s + 100 * h);
        row[1] = static_cast<uint8_t>(pos);
        c.v(0, window[s], h)[2] = static_cast<uint8_t>(s + 50 * h);
      }
    }
  }
  EXPECT_GT(c.capacity(KvCache::kWindow), start);
  EXPECT_LE(c.capacity(KvCache::kWindow), kCtx);
  EXPECT_EQ(c.used(KvCache::kWindow), kSeqs * (kSwa + kWindowRollback));
  for (int64_t i = 0; i < c.high_water(KvCache::kWindow); ++i) {
    const int32_t s = c.seq_of(KvCache::kWindow, i);
    if (s < 0) continue;
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(c.k(0, i, h)[0], s + 100 * h);
      EXPECT_EQ(c.k(0, i, h)[1], static_cast<uint8_t>(c.pos_of(KvCache::kWindow, i)));
      EXPECT_EQ(c.v(0, i, h)[2], s + 50 * h);
    }
  }
}

TEST(KvCacheTest, AFullContextIsRefusedAndClaimsNothing) {
  const ModelParams p = Windowed();
  KvCache c = Cache(p);
  ASSERT_TRUE(Add(c, 0, 0, kCtx - 4).ok());
  const Status st = Add(c, 1, 0, 5);
  EXPECT_EQ(st.code(), Code::kOutOfRange);
  EXPECT_EQ(c.used(), kCtx - 4);
  EXPECT_TRUE(Add(c, 1, 0, 4).ok());
}

}  // namespace
}  // namespace tandem::model
