// Attacks through a man in the middle (issue #19, findings 1 and 6): a tampering proxy between the
// main node and a worker flips a bit, drops a frame, replays a frame or edits the worker's
// WorkerInfo. Without a key (the only protection before protocol 4 covered the handshake alone)
// the flipped bit and the edited WorkerInfo go through unnoticed; with a key every one of them
// ends the connection with an error that names the worker, and no wrong result is returned.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "exec/executor.h"
#include "pipeline/coordinator.h"
#include "pipeline/test_worker.h"
#include "tamper_proxy.h"
#include "test_support.h"

namespace tandem {
namespace {

using testing::TamperProxy;

std::string ModelFile() { return (testing::SharedDir() / "reference/models/tiny-q4_k_m.gguf").string(); }

net::Key TestKey() {
  net::Key k;
  k.fill(0x5a);
  return k;
}

// Logits of a 10-token prompt at every position, or the run's error.
Result<std::vector<float>> PromptLogits(exec::Executor& e) {
  const int64_t V = e.params().n_vocab;
  model::Batch b;
  for (int i = 0; i < 10; ++i) b.Add(static_cast<int32_t>((i * 37 + 1) % V), i, 0, true);
  exec::RunOptions o;
  o.logits = true;
  exec::RunOutput out;
  TANDEM_RETURN_IF_ERROR(e.Clear());
  TANDEM_RETURN_IF_ERROR(e.Run(b, o, &out));
  return std::vector<float>(out.logits, out.logits + out.n_rows * V);
}

pipeline::ExecutorOptions Options(const std::string& worker, std::optional<net::Key> key, std::string* log) {
  pipeline::ExecutorOptions o;
  o.workers = {worker};
  o.n_ctx = 32;
  o.threads = 1;
  o.key = key;
  o.digest_record_dir = "";
  o.ping_interval_ms = 100;
  o.log = [log](const std::string& l) { *log += l + "\n"; };
  return o;
}

// A rule that acts once, on the first frame of at least 1000 bytes (a Result with logits from
// the worker, a Forward with hidden states towards it) seen after Arm().
struct OneShot {
  std::atomic<bool> armed{false}, fired{false};
  TamperProxy::Action action = TamperProxy::Action::kForward;
  bool flip = false;
  TamperProxy::Rule Rule() {
    return [this](size_t, std::vector<uint8_t>& f) {
      if (!armed || fired || f.size() < 1000) return TamperProxy::Action::kForward;
      fired = true;
      if (flip) f[f.size() / 2] ^= 0x40;
      return action;
    };
  }
};

class SealedLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(ModelFile())) GTEST_SKIP() << "no shared models";
    Result<model::Model> m = model::Model::Load(ModelFile());
    ASSERT_TRUE(m.ok());
    model_ = std::make_unique<model::Model>(std::move(*m));
    // Every node copies its weights (the default), Q4_0 / Q5_0 / Q8_0 / Q4_K ones into the interleaved layout:
    // the single node does too, for the same arithmetic.
    ASSERT_TRUE(model_->CopyIntoMemory(0, model_->params().n_layer, true).ok());
    exec::LocalExecutor local(*model_, 32, 1, 512);
    Result<std::vector<float>> w = PromptLogits(local);
    ASSERT_TRUE(w.ok());
    want_ = *w;
  }

  // Opens a pipeline through the proxy, arms `shot` on one direction, runs the prompt twice (a
  // replayed frame is only seen when the next one is read) and returns the first failure, or the
  // logits of the first run (the one tampered with).
  Result<std::vector<float>> RunTampered(std::optional<net::Key> key, bool to_worker, OneShot* shot, std::string* log) {
    pipeline::TestWorker w(key);
    TamperProxy proxy(w.w->port());
    proxy.SetRule(to_worker, shot->Rule());
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Coordinator> c,
                            pipeline::Coordinator::Open(*model_, ModelFile(), Options(proxy.addr(), key, log)));
    shot->armed = true;
    TANDEM_ASSIGN_OR_RETURN(std::vector<float> first, PromptLogits(*c));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // pings go on meanwhile
    TANDEM_RETURN_IF_ERROR(PromptLogits(*c).status());
    return first;
  }

  std::unique_ptr<model::Model> model_;
  std::vector<float> want_;
};

TEST_F(SealedLinkTest, AFlippedBitGoesUnnoticedInTheClearAndEndsASealedLink) {
  {
    OneShot shot;
    shot.flip = true;
    std::string log;
    Result<std::vector<float>> got = RunTampered(std::nullopt, /*to_worker=*/false, &shot, &log);
    ASSERT_TRUE(shot.fired);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_NE(*got, want_) << "without a key the changed logits should have reached the caller (the attack)";
  }
  for (bool to_worker : {false, true}) {
    SCOPED_TRACE(to_worker ? "towards the worker" : "from the worker");
    OneShot shot;
    shot.flip = true;
    std::string log;
    Result<std::vector<float>> got = RunTampered(TestKey(), to_worker, &shot, &log);
    ASSERT_TRUE(shot.fired);
    ASSERT_FALSE(got.ok()) << "a changed frame was accepted";
    EXPECT_NE(got.status().message().find("worker 127.0.0.1:"), std::string::npos) << got.status().ToString();
    if (!to_worker) {
      EXPECT_NE(got.status().message().find("failed authentication"), std::string::npos) << got.status().ToString();
    }
  }
}

TEST_F(SealedLinkTest, ADroppedOrReplayedFrameEndsASealedLink) {
  for (TamperProxy::Action a : {TamperProxy::Action::kDrop, TamperProxy::Action::kTwice}) {
    SCOPED_TRACE(a == TamperProxy::Action::kDrop ? "dropped" : "replayed");
    OneShot shot;
    shot.action = a;
    std::string log;
    Result<std::vector<float>> got = RunTampered(TestKey(), /*to_worker=*/false, &shot, &log);
    ASSERT_TRUE(shot.fired);
    ASSERT_FALSE(got.ok()) << "a dropped or replayed frame went unnoticed";
    EXPECT_NE(got.status().message().find("failed authentication"), std::string::npos) << got.status().ToString();
    EXPECT_NE(got.status().message().find("worker 127.0.0.1:"), std::string::npos) << got.status().ToString();
  }
}

// With a key every link is sealed, the one between the two workers included (the first worker
// makes it with its own handshake): a two-worker pipeline gives the single node's logits, and its
// workers' links carry no frame in the clear (the proxy in front of the second worker sees only
// Sealed frames after the handshake).
TEST_F(SealedLinkTest, ATwoWorkerSealedPipelineMatchesOneNode) {
  pipeline::TestWorker a(TestKey()), b(TestKey());
  TamperProxy proxy(b.w->port());
  std::atomic<int> clear_after_handshake{0}, sealed{0};
  auto watch = [&](size_t index, std::vector<uint8_t>& f) {
    uint16_t type = 0;
    std::memcpy(&type, f.data() + 4, 2);
    if (type == static_cast<uint16_t>(net::MsgType::kSealed)) {
      ++sealed;
    } else if (index >= 2) {  // after Hello/Auth or Challenge/Welcome
      ++clear_after_handshake;
    }
    return TamperProxy::Action::kForward;
  };
  proxy.SetRule(true, watch);
  proxy.SetRule(false, watch);
  std::string log;
  pipeline::ExecutorOptions o = Options(a.addr(), TestKey(), &log);
  o.workers = {a.addr(), proxy.addr()};
  Result<std::unique_ptr<pipeline::Coordinator>> c = pipeline::Coordinator::Open(*model_, ModelFile(), o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Result<std::vector<float>> got = PromptLogits(**c);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, want_);
  c->reset();
  EXPECT_GT(sealed.load(), 4);
  EXPECT_EQ(clear_after_handshake.load(), 0);
}

// The worker's free memory in its Welcome (the second frame it sends) set to 1 PiB: in the clear
// the main node plans with it; with a key the worker's proof no longer matches.
TEST_F(SealedLinkTest, AnEditedWorkerInfoIsRefusedWithAKey) {
  auto edit = [](size_t index, std::vector<uint8_t>& f) {
    if (index != 1) return TamperProxy::Action::kForward;
    size_t off = net::kFrameHeaderBytes + net::kMacBytes;
    for (int s = 0; s < 2; ++s) {  // name, cpu_features
      uint32_t n = 0;
      std::memcpy(&n, f.data() + off, 4);
      off += 4 + n;
    }
    off += 4;  // threads
    const uint64_t free_memory = uint64_t{1} << 50;
    std::memcpy(f.data() + off, &free_memory, 8);
    return TamperProxy::Action::kForward;
  };
  {
    pipeline::TestWorker w;
    TamperProxy proxy(w.w->port());
    proxy.SetRule(false, edit);
    std::string log;
    Result<std::string> plan = pipeline::DescribePlan(*model_, Options(proxy.addr(), std::nullopt, &log));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_NE(plan->find("1048576.0 GiB free"), std::string::npos) << "the edit should reach the plan in the clear:\n" << *plan;
  }
  {
    pipeline::TestWorker w(TestKey());
    TamperProxy proxy(w.w->port());
    proxy.SetRule(false, edit);
    std::string log;
    Result<std::string> plan = pipeline::DescribePlan(*model_, Options(proxy.addr(), TestKey(), &log));
    ASSERT_FALSE(plan.ok()) << *plan;
    EXPECT_NE(plan.status().message().find("changed on the way"), std::string::npos) << plan.status().ToString();
  }
}

}  // namespace
}  // namespace tandem
