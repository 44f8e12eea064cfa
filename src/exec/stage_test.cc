// Stage: the rules that decide which sequence samples, micro-batch splitting, the order in which
// a step is applied, and two stages in a row computing exactly what one stage over every layer
// computes.
#include "exec/stage.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

namespace tandem::exec {
namespace {

model::Batch MakeBatch(std::initializer_list<std::tuple<int32_t, int32_t, bool>> rows) {
  model::Batch b;
  int32_t pos = 0;
  for (const auto& [token, seq, mark] : rows) b.Add(token, pos++, seq, mark);
  return b;
}

TEST(StageTest, MicroBatchesCoverTheBatchInOrder) {
  model::Batch b;
  for (int i = 0; i < 11; ++i) b.Add(100 + i, i, i % 2, i == 10);
  model::Batch sub;
  std::vector<std::pair<int64_t, int64_t>> spans;
  model::Batch joined;
  ASSERT_TRUE(ForEachMicroBatch(b, 4, &sub, [&](const model::Batch& s, int64_t i, int64_t e) {
                spans.emplace_back(i, e);
                EXPECT_EQ(s.size(), e - i);
                for (int64_t j = 0; j < s.size(); ++j) joined.Add(s.tokens[j], s.pos[j], s.seq[j], s.logits[j]);
                return Status::Ok();
              }).ok());
  EXPECT_EQ(spans, (std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {4, 8}, {8, 11}}));
  EXPECT_EQ(joined.tokens, b.tokens);
  EXPECT_EQ(joined.pos, b.pos);
  EXPECT_EQ(joined.seq, b.seq);
  EXPECT_EQ(joined.logits, b.logits);
  // The first error stops the walk and is returned.
  int calls = 0;
  Status st = ForEachMicroBatch(b, 4, &sub, [&](const model::Batch&, int64_t, int64_t) {
    ++calls;
    return Status::OutOfRange("full");
  });
  EXPECT_EQ(st.code(), Code::kOutOfRange);
  EXPECT_EQ(calls, 1);
}

TEST(StageTest, AutoMicroBatchFillsStagesInMultiplesOfEight) {
  EXPECT_EQ(AutoMicroBatch(100, 1), 512);   // one node: as few passes as possible
  EXPECT_EQ(AutoMicroBatch(5000, 1), 512);
  EXPECT_EQ(AutoMicroBatch(512, 2), 32);    // 16 micro-batches for 2 stages
  EXPECT_EQ(AutoMicroBatch(4096, 2), 256);
  EXPECT_EQ(AutoMicroBatch(100, 3), 32);    // never under 32
  EXPECT_EQ(AutoMicroBatch(100000, 2), 512);  // never over 512
  for (int64_t n : {1, 7, 100, 513, 2049, 9999}) {
    for (int s : {1, 2, 3, 5}) EXPECT_EQ(AutoMicroBatch(n, s) % 8, 0) << n << " tokens, " << s << " stages";
  }
}

std::string ModelPath(const char* name) {
  return (std::filesystem::path(TANDEM_SHARED_DIR) / "reference/models" / name).string();
}

// Layers [0, k) then [k, n) as two stages, the hidden states handed from one to the next, give
// the same logits to the bit as one stage over [0, n); a step's truncation and the sampler it
// configures act on the stage that holds the head.
TEST(StageTest, TwoStagesInARowEqualOneStage) {
  const std::string path = ModelPath("tiny-q4_k_m.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared reference model at " << path;
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const int64_t n_layer = m->params().n_layer, n_embd = m->params().n_embd, V = m->params().n_vocab;
  ASSERT_GE(n_layer, 2);
  Stage whole(*m, 64, 1, 0, -1, {});
  Stage first(*m, 64, 1, 0, n_layer / 2, {});
  Stage second(*m, 64, 1, n_layer / 2, n_layer, {});
  EXPECT_TRUE(whole.is_first() && whole.is_last());
  EXPECT_TRUE(first.is_first() && !first.is_last());
  EXPECT_TRUE(!second.is_first() && second.is_last());

  sampling::SamplerParams greedy;
  greedy.temperature = 0;
  const std::vector<SequenceSampler> samplers = {{0, greedy, {}}};
  StageStep step;
  step.samplers = &samplers;
  model::Batch b = MakeBatch({{1, 0, false}, {17, 0, false}, {42, 0, true}});
  ASSERT_TRUE(whole.Forward(b, nullptr, step).ok());
  ASSERT_TRUE(first.Forward(b, nullptr, step).ok());  // not last: no sampler, no error
  model::Batch no_tokens = b;
  no_tokens.tokens.clear();
  ASSERT_TRUE(second.Forward(no_tokens, first.hidden(), step).ok());
  ASSERT_EQ(whole.n_logits(), 1);
  ASSERT_EQ(second.n_logits(), 1);
  EXPECT_EQ(std::memcmp(whole.logits(), second.logits(), V * sizeof(float)), 0);
  std::vector<int32_t> t1, t2, t3;
  ASSERT_TRUE(whole.Sample(b, &t1).ok() && second.Sample(no_tokens, &t2).ok());
  ASSERT_EQ(t1.size(), 1u);
  EXPECT_EQ(t1, t2);
  EXPECT_FALSE(first.Sample(b, &t3).ok());  // only the last stage samples

  // Truncating position 2 and recomputing it gives the same logits again.
  const std::vector<Truncation> truncate = {{0, 2}};
  StageStep again;
  again.truncate = &truncate;
  model::Batch last = MakeBatch({{42, 0, true}});
  last.pos[0] = 2;
  ASSERT_TRUE(first.Forward(last, nullptr, again).ok());
  model::Batch last_hidden = last;
  last_hidden.tokens.clear();
  std::vector<float> h(first.hidden(), first.hidden() + n_embd);
  ASSERT_TRUE(second.Forward(last_hidden, h.data(), again).ok());
  EXPECT_EQ(std::memcmp(whole.logits(), second.logits(), V * sizeof(float)), 0);
  EXPECT_EQ(second.context().cache().used(), 3);
  second.Clear();
  EXPECT_EQ(second.context().cache().used(), 0);
}

// Sampler fields from the wire are bounded before anything is sized by them: a penalty window of
// 2^30 tokens and a history token id of 2^31-2 (which sized an 8 GiB table on main before) are
// refused with a message, and the stage keeps working.
TEST(StageTest, HugeSamplerFieldsAreRefused) {
  const std::string path = ModelPath("tiny-q4_k_m.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared reference model at " << path;
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  Stage stage(*m, 32, 1, 0, -1, {});
  model::Batch b = MakeBatch({{1, 0, true}});
  std::vector<SequenceSampler> samplers(1);
  sampling::SamplerParams& p = samplers[0].params;
  std::vector<int32_t>& history = samplers[0].history;
  history = {1, 2};
  StageStep step;
  step.samplers = &samplers;
  p.repeat_last_n = 1 << 30;
  Status st = stage.ApplyStep(step);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("repeat_last_n"), std::string::npos) << st.ToString();
  p.repeat_last_n = 64;
  history = {1, 2147483646};
  st = stage.ApplyStep(step);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.ToString();
  p.banned = {-5};
  history = {1};
  EXPECT_FALSE(stage.ApplyStep(step).ok());
  p.banned.clear();
  ASSERT_TRUE(stage.Forward(b, nullptr, step).ok());
  std::vector<int32_t> tokens;
  EXPECT_TRUE(stage.Sample(b, &tokens).ok());
}

}  // namespace
}  // namespace tandem::exec
