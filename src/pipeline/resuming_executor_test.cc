// ResumingExecutor over fake pipelines: what it re-computes after a failure (every sequence's
// committed tokens, after truncations; every sampler with its history and draws), what it submits
// again, which workers the new pipeline gets, and how it fails when the rest cannot run the model.
// tests/resume_cli_test.cc kills real workers.
#include "pipeline/resuming_executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "exec/forwarding_executor.h"
#include "model/model.h"

namespace tandem::pipeline {
namespace {

// An executor that samples token 1000 + 100 * seq + pos for every marked row, and fails on demand.
class FakeExecutor : public exec::Executor {
 public:
  struct Call {
    model::Batch batch;
    exec::RunOptions options;
  };
  std::vector<Call> calls;
  int clears = 0;
  Status fail;
  std::string failed;

  Result<uint64_t> Submit(const model::Batch& b, const exec::RunOptions& o) override {
    if (!fail.ok()) return fail;
    calls.push_back({b, o});
    std::vector<int32_t> t;
    for (int64_t i = 0; i < b.size(); ++i) {
      if (o.sample && b.logits[i]) t.push_back(1000 + 100 * b.seq[i] + b.pos[i]);
    }
    out_[++ticket_] = t;
    return ticket_;
  }
  Status Collect(uint64_t ticket, exec::RunOutput* out) override {
    if (!fail.ok()) return fail;
    out->tokens = out_.at(ticket);
    out->token = out->tokens.empty() ? -1 : out->tokens.back();
    out_.erase(ticket);
    return Status::Ok();
  }
  Status Health() const override { return fail; }
  std::string failed_node() const override { return failed; }
  Status Clear() override {
    ++clears;
    return Status::Ok();
  }
  int64_t n_ctx() const override { return 64; }
  const model::ModelParams& params() const override { return params_; }
  std::vector<exec::StageInfo> stages() const override { return {{"main", 0, 2}}; }

 private:
  model::ModelParams params_;
  std::map<uint64_t, std::vector<int32_t>> out_;
  uint64_t ticket_ = 0;
};

struct Harness {
  FakeExecutor* current = nullptr;  // the running fake (owned by the executor)
  std::vector<std::vector<std::string>> opened;  // the workers of each pipeline opened since
  Status open_error;
  std::map<std::string, std::vector<Status>> probe_answers;  // per worker, in turn (then Ok)
  std::set<std::string> dead;  // probes fail
  std::vector<std::string> lines;
  std::unique_ptr<ResumingExecutor> ex;

  Harness(std::vector<std::string> workers, std::vector<std::string> standby) {
    auto first = std::make_unique<FakeExecutor>();
    current = first.get();
    ResumeOptions o;
    o.workers = std::move(workers);
    o.standby = std::move(standby);
    o.log = [this](const std::string& l) { lines.push_back(l); };
    o.busy_wait_ms = 2000;
    ex = std::make_unique<ResumingExecutor>(
        std::move(first), o,
        [this](const std::vector<std::string>& w, bool) -> Result<std::unique_ptr<exec::Executor>> {
          opened.push_back(w);
          if (!open_error.ok()) return open_error;
          auto next = std::make_unique<FakeExecutor>();
          current = next.get();
          return std::unique_ptr<exec::Executor>(std::move(next));
        },
        [this](const std::string& w) -> Status {
          if (dead.count(w)) return Status::IOError("connection refused");
          std::vector<Status>& a = probe_answers[w];
          if (a.empty()) return Status::Ok();
          Status s = a.front();
          a.erase(a.begin());
          return s;
        });
  }
  // The pipeline fails blaming `node`; `dies`: the node is gone too (else only a link broke).
  void Fail(const std::string& node, bool dies = true) {
    current->fail = Status::IOError("worker " + node + " disconnected");
    current->failed = node;
    if (dies) dead.insert(node);
  }
};

sampling::SamplerParams Seeded(float temperature) {
  sampling::SamplerParams p;
  p.temperature = temperature;
  p.seed = 5;
  p.repeat_last_n = 4;
  return p;
}

TEST(ResumingExecutorTest, ReComputesTheCommittedTokensAndSamplersThenSubmitsTheBatchInFlightAgain) {
  Harness h({"w1", "w2"}, {"s1"});
  exec::Executor& ex = *h.ex;
  exec::RunOutput out;
  // Sequence 0: a prompt of 3 tokens, sampled at temperature 0.8 (one draw per token).
  model::Batch b;
  for (int p = 0; p < 3; ++p) b.Add(10 + p, p, 0, p == 2);
  exec::RunOptions prompt;
  prompt.sample = true;
  prompt.samplers.push_back({0, Seeded(0.8f), {10, 11, 12}});
  ASSERT_TRUE(ex.Run(b, prompt, &out).ok());
  EXPECT_EQ(out.tokens, std::vector<int32_t>{1002});
  // Sequence 1: greedy (no draws), 2 tokens.
  b.Clear();
  b.Add(20, 0, 1, false);
  b.Add(21, 1, 1, true);
  exec::RunOptions greedy = prompt;
  greedy.samplers = {{1, Seeded(0), {20, 21}}};
  ASSERT_TRUE(ex.Run(b, greedy, &out).ok());
  // Two decode steps of both sequences in one batch each.
  exec::RunOptions step;
  step.sample = true;
  for (int32_t p : {3, 4}) {
    b.Clear();
    b.Add(1000 + p - 1, p, 0, true);
    b.Add(1100 + p - 2, p - 1, 1, true);
    ASSERT_TRUE(ex.Run(b, step, &out).ok());
  }
  // Sequence 1 rewinds to position 2 (a rejected guess) and takes another token there.
  b.Clear();
  b.Add(77, 2, 1, false);
  exec::RunOptions rewind;
  rewind.truncate = {{1, 2}};
  ASSERT_TRUE(ex.Run(b, rewind, &out).ok());

  // The next batch is in flight when worker w2 dies.
  b.Clear();
  b.Add(1004, 5, 0, true);
  Result<uint64_t> t = ex.Submit(b, step);
  ASSERT_TRUE(t.ok());
  h.Fail("w2");
  ASSERT_TRUE(ex.Collect(*t, &out).ok());
  EXPECT_EQ(out.tokens, std::vector<int32_t>{1005});  // from the new pipeline
  ASSERT_EQ(h.opened.size(), 1u);
  EXPECT_EQ(h.opened[0], (std::vector<std::string>{"w1", "s1"}));  // the survivor, then the standby

  // The new pipeline got every batch that built the caches again, in the same shapes, with their
  // truncations and without results; the last of them also carries every sampler's state; then
  // the batch in flight.
  const std::vector<FakeExecutor::Call>& calls = h.current->calls;
  ASSERT_EQ(calls.size(), 6u);
  const std::vector<std::vector<int32_t>> want_tokens = {{10, 11, 12}, {20, 21}, {1002, 1101}, {1003, 1102}, {77}};
  for (size_t i = 0; i < 5; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(calls[i].batch.tokens, want_tokens[i]);
    EXPECT_EQ(calls[i].batch.logits, std::vector<uint8_t>(want_tokens[i].size(), 0));
    EXPECT_FALSE(calls[i].options.sample);
    EXPECT_FALSE(calls[i].options.logits);
  }
  EXPECT_EQ(calls[2].batch.pos, (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(calls[2].batch.seq, (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(calls[4].options.truncate.size(), 1u);
  EXPECT_EQ(calls[4].options.truncate[0].seq, 1);
  EXPECT_EQ(calls[4].options.truncate[0].from, 2);
  ASSERT_EQ(calls[0].options.samplers.size(), 1u);  // the prompt's own configuration
  EXPECT_EQ(calls[0].options.samplers[0].params.skip_draws, 0u);
  ASSERT_EQ(calls[4].options.samplers.size(), 2u);
  const exec::SequenceSampler& s0 = calls[4].options.samplers[0];
  EXPECT_EQ(s0.seq, 0);
  EXPECT_EQ(s0.params.skip_draws, 3u);  // three tokens sampled at temperature 0.8
  EXPECT_EQ(s0.history, (std::vector<int32_t>{12, 1002, 1003, 1004}));  // the last repeat_last_n
  const exec::SequenceSampler& s1 = calls[4].options.samplers[1];
  EXPECT_EQ(s1.params.skip_draws, 0u);  // greedy draws nothing
  EXPECT_EQ(s1.history, (std::vector<int32_t>{21, 1101, 1102, 1103}));
  EXPECT_EQ(calls[5].batch.tokens, std::vector<int32_t>{1004});
  EXPECT_TRUE(calls[5].options.sample);
  EXPECT_TRUE(ex.Health().ok());
  EXPECT_EQ(ex.failed_node(), "w2");
  ASSERT_FALSE(h.lines.empty());
  EXPECT_NE(h.lines.front().find("lost worker w2"), std::string::npos) << h.lines.front();
  EXPECT_EQ(h.ex->resumes().size(), 1u);
  EXPECT_EQ(h.ex->resumes()[0].recomputed_tokens, 10);
}

TEST(ResumingExecutorTest, WhenTheRestCannotHoldTheModelItFailsWithTheReason) {
  Harness h({"w1", "w2"}, {});
  exec::RunOutput out;
  model::Batch b;
  b.Add(1, 0, 0, true);
  exec::RunOptions ro;
  ro.sample = true;
  ro.samplers.push_back({0, Seeded(0), {1}});
  ASSERT_TRUE(h.ex->Run(b, ro, &out).ok());
  h.Fail("w1");
  h.open_error = Status::ResourceExhausted("main (this machine) needs 9.0 GiB but has 4.0 GiB free");
  b.Clear();
  b.Add(1000, 1, 0, true);
  Result<uint64_t> t = h.ex->Submit(b, exec::RunOptions{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kResourceExhausted);
  EXPECT_NE(t.status().message().find("cannot resume without w1"), std::string::npos) << t.status().ToString();
  EXPECT_NE(t.status().message().find("9.0 GiB"), std::string::npos) << t.status().ToString();
  EXPECT_FALSE(h.ex->Health().ok());
  EXPECT_FALSE(h.ex->Submit(b, exec::RunOptions{}).ok());  // and stays failed
}

TEST(ResumingExecutorTest, BusySurvivorsAreWaitedForAndDeadOnesDropped) {
  Harness h({"w1", "w2", "w3"}, {});
  h.probe_answers["w1"] = {Status::Unavailable("busy serving another session"), Status::Unavailable("busy")};
  h.probe_answers["w3"] = {Status::IOError("connection refused")};
  exec::RunOutput out;
  model::Batch b;
  b.Add(1, 0, 0, false);
  ASSERT_TRUE(h.ex->Run(b, exec::RunOptions{}, &out).ok());
  h.Fail("w2");
  b.Clear();
  b.Add(2, 1, 0, false);
  ASSERT_TRUE(h.ex->Run(b, exec::RunOptions{}, &out).ok());
  ASSERT_EQ(h.opened.size(), 1u);
  EXPECT_EQ(h.opened[0], std::vector<std::string>{"w1"});
}

// A worker reports that its link to the next one broke: it is blamed, but it answers, so it stays;
// the next worker, which does not answer, is the one dropped. A worker that answers the probe but
// fails while the new pipeline opens is dropped as well.
TEST(ResumingExecutorTest, OnlyNodesThatDoNotAnswerOrFailToOpenAreDropped) {
  Harness h({"w1", "w2", "w3"}, {});
  exec::RunOutput out;
  model::Batch b;
  b.Add(1, 0, 0, false);
  ASSERT_TRUE(h.ex->Run(b, exec::RunOptions{}, &out).ok());
  h.Fail("w1", /*dies=*/false);
  h.dead.insert("w2");
  b.Clear();
  b.Add(2, 1, 0, false);
  ASSERT_TRUE(h.ex->Run(b, exec::RunOptions{}, &out).ok());
  ASSERT_EQ(h.opened.size(), 1u);
  EXPECT_EQ(h.opened[0], (std::vector<std::string>{"w1", "w3"}));
  EXPECT_NE(h.lines.front().find("lost worker w2"), std::string::npos) << h.lines.front();

  h.Fail("w3");
  h.dead.erase("w3");  // answers the probe, then fails to open
  h.open_error = Status::IOError("worker w3: recv: Connection reset by peer");
  b.Clear();
  b.Add(3, 2, 0, false);
  Result<uint64_t> t = h.ex->Submit(b, exec::RunOptions{});
  // Both attempts fail here (open_error stays); the second names no worker it can drop.
  ASSERT_FALSE(t.ok());
  ASSERT_GE(h.opened.size(), 3u);
  EXPECT_EQ(h.opened[1], (std::vector<std::string>{"w1", "w3"}));
  EXPECT_EQ(h.opened[2], std::vector<std::string>{"w1"});
}

TEST(ResumingExecutorTest, RejoinUsesALostWorkerAgainOnceItAnswers) {
  Harness h({"w1", "w2"}, {"s1"});
  exec::RunOutput out;
  model::Batch b;
  b.Add(1, 0, 0, false);
  b.Add(2, 1, 0, false);
  ASSERT_TRUE(h.ex->Run(b, exec::RunOptions{}, &out).ok());
  EXPECT_TRUE(h.ex->Rejoin().ok());
  EXPECT_TRUE(h.opened.empty());  // nothing was lost: nothing to do
  h.Fail("w2");
  b.Clear();
  b.Add(3, 2, 0, false);
  ASSERT_TRUE(h.ex->Run(b, exec::RunOptions{}, &out).ok());
  ASSERT_EQ(h.opened.size(), 1u);
  EXPECT_TRUE(h.ex->Rejoin().ok());
  EXPECT_EQ(h.opened.size(), 1u);  // still down
  h.dead.erase("w2");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // at most one try a second
  EXPECT_TRUE(h.ex->Rejoin().ok());
  ASSERT_EQ(h.opened.size(), 2u);
  EXPECT_EQ(h.opened[1], (std::vector<std::string>{"w1", "w2"}));  // the standby leaves
  ASSERT_EQ(h.current->calls.size(), 2u);  // the two batches, as they were
  EXPECT_EQ(h.current->calls[0].batch.tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(h.current->calls[1].batch.tokens, std::vector<int32_t>{3});
  EXPECT_EQ(h.ex->failed_node(), "");
}

// A real executor that can be made to fail, as a pipeline whose worker died.
class Failable : public exec::ForwardingExecutor {
 public:
  using ForwardingExecutor::ForwardingExecutor;
  Status fail;
  Result<uint64_t> Submit(const model::Batch& b, const exec::RunOptions& o) override {
    if (!fail.ok()) return fail;
    return inner().Submit(b, o);
  }
  Status Collect(uint64_t t, exec::RunOutput* out) override {
    if (!fail.ok()) return fail;
    return inner().Collect(t, out);
  }
  Status Health() const override { return fail; }
  std::string failed_node() const override { return fail.ok() ? "" : "w1"; }
};

// After a resumption the logits are those of a run without the failure, to the bit: the caches
// are rebuilt by batches of the shapes that built them (a prompt's rows in one batch, each
// decode step alone). (Before the kernels became batch-invariant, re-computing every committed
// token in one batch gave logits that differed in the last bits, enough to change a greedy
// choice between near-equal tokens.)
TEST(ResumingExecutorTest, AfterAResumptionTheLogitsEqualAnUndisturbedRunToTheBit) {
  const std::string path =
      (std::filesystem::path(TANDEM_SHARED_DIR) / "reference/models/tiny-q4_k_m.gguf").string();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared reference model at " << path;
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const int64_t V = m->params().n_vocab;
  auto local = [&] { return std::make_unique<exec::LocalExecutor>(*m, 256, 1); };

  // A prompt of 40 tokens, then 80 decode steps (the failure before step 60); the logits of
  // every step. (With fewer committed tokens one batch happens to give the same bits here.)
  auto steps = [&](exec::Executor& ex, const std::function<void(int)>& before_step) {
    std::vector<std::vector<float>> logits;
    model::Batch b;
    for (int p = 0; p < 40; ++p) b.Add((3 + 7 * p) % 500, p, 0, p == 39);
    exec::RunOptions ro;
    ro.logits = true;
    exec::RunOutput out;
    EXPECT_TRUE(ex.Run(b, ro, &out).ok());
    for (int i = 0; i < 80; ++i) {
      before_step(i);
      b.Clear();
      b.Add((5 + 11 * i) % 500, 40 + i, 0, true);
      Status st = ex.Run(b, ro, &out);
      EXPECT_TRUE(st.ok()) << st.ToString();
      if (!st.ok()) break;
      logits.emplace_back(out.logits, out.logits + V);
    }
    return logits;
  };
  exec::LocalExecutor plain(*m, 256, 1);
  const std::vector<std::vector<float>> want = steps(plain, [](int) {});

  auto first = std::make_unique<Failable>(local());
  Failable* running = first.get();
  ResumeOptions o;
  o.workers = {"w1"};
  o.log = [](const std::string&) {};
  ResumingExecutor ex(
      std::move(first), o,
      [&](const std::vector<std::string>&, bool) -> Result<std::unique_ptr<exec::Executor>> {
        return std::unique_ptr<exec::Executor>(std::make_unique<Failable>(local()));
      },
      [](const std::string&) { return Status::IOError("connection refused"); });
  const std::vector<std::vector<float>> got = steps(ex, [&](int i) {
    if (i == 60) running->fail = Status::IOError("worker w1 disconnected");
  });
  ASSERT_EQ(ex.resumes().size(), 1u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), V * sizeof(float)), 0) << "step " << i;
  }
}

}  // namespace
}  // namespace tandem::pipeline
