// Engine: a new turn of a conversation computes only its new tokens (the cache keeps the shared
// prefix), on one node and over in-process workers; the text is what a fresh engine gives.
#include "engine/engine.h"
#include "engine/bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "exec/forwarding_executor.h"
#include "pipeline/test_worker.h"

namespace tandem::engine {
namespace {

std::string ModelPath() {
  return (std::filesystem::path(TANDEM_SHARED_DIR) / "reference/models/stories260K.gguf").string();
}

std::string Generate(Engine& e, const std::string& prompt, GenerateStats* stats) {
  GenerateOptions g;
  g.n_predict = 12;
  g.sampling.temperature = 0;
  std::string text;
  Result<GenerateStats> s = e.Generate(prompt, g, [&](std::string_view t) {
    text += t;
    return true;
  });
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (s.ok()) *stats = *s;
  return text;
}

void CheckTurns(const std::vector<std::string>& workers) {
  EngineOptions o;
  o.model_path = ModelPath();
  o.exec.threads = 1;
  o.exec.n_ctx = 256;
  o.exec.workers = workers;
  o.exec.log = [](const std::string&) {};
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  GenerateStats s1, s2, s3;
  const std::string turn1 = "Once upon a time, there was a cat";
  const std::string reply1 = Generate(**e, turn1, &s1);
  EXPECT_EQ(s1.prompt_tokens_cached, 0);
  EXPECT_EQ(s1.prompt_tokens_computed, s1.prompt_tokens);
  // The next turn re-sends the conversation: the first turn's prompt and reply are in the cache.
  const std::string turn2 = turn1 + reply1 + ". The cat said";
  const std::string reply2 = Generate(**e, turn2, &s2);
  EXPECT_GE(s2.prompt_tokens_cached, s1.prompt_tokens) << "the first turn was computed again";
  EXPECT_LT(s2.prompt_tokens_computed, s2.prompt_tokens - s1.prompt_tokens + 2)
      << s2.prompt_tokens_computed << " of " << s2.prompt_tokens << " computed";
  EXPECT_EQ(s2.prompt_tokens_cached + s2.prompt_tokens_computed, s2.prompt_tokens);
  // A prompt that departs early keeps only the shared beginning.
  const std::string other = "Once upon a time, there was a dog";
  const std::string reply3 = Generate(**e, other, &s3);
  EXPECT_LT(s3.prompt_tokens_cached, s1.prompt_tokens);
  EXPECT_GT(s3.prompt_tokens_cached, 0);

  // A fresh engine on this machine alone, computing the second turn from nothing, writes the
  // same reply.
  EngineOptions alone = o;
  alone.exec.workers.clear();
  Result<std::unique_ptr<Engine>> fresh = Engine::Open(alone);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  GenerateStats f;
  EXPECT_EQ(Generate(**fresh, turn2, &f), reply2);
  EXPECT_EQ(f.prompt_tokens_cached, 0);
  // And after the truncation that `other` needed, its reply is a fresh one's too.
  Result<std::unique_ptr<Engine>> fresh2 = Engine::Open(alone);
  ASSERT_TRUE(fresh2.ok());
  EXPECT_EQ(Generate(**fresh2, other, &f), reply3);
}

TEST(EngineTest, ANewTurnComputesOnlyItsNewTokensOnOneNode) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  CheckTurns({});
}

TEST(EngineTest, ANewTurnComputesOnlyItsNewTokensOverWorkers) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  pipeline::TestWorker w1, w2;
  CheckTurns({w1.addr(), w2.addr()});
}

}  // namespace
}  // namespace tandem::engine

namespace tandem::engine {
namespace {

// The small-batch figure of `tandem bench`: both timings are measured, and every timed run drops
// the previous one's tokens first, so the cache ends holding the prefix and the last batch only.
TEST(BenchTest, SmallBatchTruncatesBetweenRuns) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  Result<model::Model> m = model::Model::Load(ModelPath());
  ASSERT_TRUE(m.ok());
  exec::LocalExecutor ex(*m, 512, 1);
  Result<SmallBatchResult> r = RunSmallBatch(ex, 8, 100, 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->n, 8);
  EXPECT_EQ(r->at, 100);
  EXPECT_GT(r->batch_ms, 0);
  EXPECT_GT(r->step_ms, 0);
  EXPECT_EQ(ex.context().cache().used(), 108);
  EXPECT_FALSE(RunSmallBatch(ex, 8, 510, 5).ok());  // does not fit the context
  EXPECT_FALSE(RunSmallBatch(ex, 0, 100, 5).ok());
}

// Records what a bench sends: batch positions, truncations and clears.
class RecordingExecutor : public exec::ForwardingExecutor {
 public:
  using ForwardingExecutor::ForwardingExecutor;
  Result<uint64_t> Submit(const model::Batch& b, const exec::RunOptions& o) override {
    runs.push_back({b.pos.empty() ? -1 : *std::min_element(b.pos.begin(), b.pos.end()), o.truncate});
    return ForwardingExecutor::Submit(b, o);
  }
  Status Clear() override {
    ++clears;
    return ForwardingExecutor::Clear();
  }
  struct Run {
    int32_t first_pos;
    std::vector<exec::Truncation> truncate;
  };
  std::vector<Run> runs;
  int clears = 0;
};

// `bench -d`: the depth is filled once, every later run starts at its end after truncating back
// to it, and the tests are named as llama-bench names them.
TEST(BenchTest, DepthIsFilledOnceAndEveryRunStartsAfterIt) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  Result<model::Model> m = model::Model::Load(ModelPath());
  ASSERT_TRUE(m.ok());
  auto local = std::make_unique<exec::LocalExecutor>(*m, 128, 1);
  exec::LocalExecutor* inner = local.get();
  RecordingExecutor ex(std::move(local));
  BenchOptions o;
  o.n_depth = 40;
  o.n_prompt = 16;
  o.n_gen = 5;
  o.repetitions = 2;
  Result<std::vector<BenchResult>> r = RunBench(ex, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].test, "pp16 @ d40");
  EXPECT_EQ((*r)[1].test, "tg5 @ d40");
  EXPECT_EQ(ex.clears, 1);
  ASSERT_GT(ex.runs.size(), 1u);
  EXPECT_EQ(ex.runs[0].first_pos, 0);  // the fill
  EXPECT_TRUE(ex.runs[0].truncate.empty());
  int truncating = 0;
  for (size_t i = 1; i < ex.runs.size(); ++i) {
    EXPECT_GE(ex.runs[i].first_pos, 40) << "run " << i;
    if (ex.runs[i].first_pos == 40) {  // a run's first batch drops the previous run's tokens
      ASSERT_EQ(ex.runs[i].truncate.size(), 1u) << "run " << i;
      EXPECT_EQ(ex.runs[i].truncate[0].seq, 0);
      EXPECT_EQ(ex.runs[i].truncate[0].from, 40);
      ++truncating;
    }
  }
  EXPECT_EQ(truncating, 2 * (1 + o.repetitions));  // a warm-up and the repetitions, per test
  EXPECT_EQ(inner->context().cache().used(), 40 + 5);
  o.n_depth = 120;  // with 16 more, past the context
  EXPECT_FALSE(RunBench(ex, o).ok());
}

}  // namespace
}  // namespace tandem::engine
