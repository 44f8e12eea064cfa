// In-process pipelines: workers serving on loopback threads, a Coordinator driving them, and
// the results compared with the whole model on one node.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "pipeline/coordinator.h"
#include "exec/executor.h"
#include "pipeline/test_worker.h"
#include "pipeline/worker.h"
#include "net/auth.h"
#include "test_support.h"

namespace tandem::pipeline {
namespace {

std::string Model(const char* name) {
  return (std::filesystem::path(TANDEM_SHARED_DIR) / "reference/models" / name).string();
}

model::Batch Prompt(int n, int vocab) {
  model::Batch b;
  for (int i = 0; i < n; ++i) b.Add((i * 37 + 1) % vocab, i, 0, true);
  return b;
}

// Runs a prompt with logits at every position, then `steps` greedy steps; returns every logit and token.
// With `forced`, the steps feed those tokens instead of the sampled ones (the sampled ones are
// still returned).
void RunAll(exec::Executor& e, std::vector<float>* logits, std::vector<int32_t>* tokens, int steps = 8,
            const std::vector<int32_t>* forced = nullptr) {
  const int64_t V = e.params().n_vocab;
  model::Batch b = Prompt(12, static_cast<int>(V));
  exec::RunOptions o;
  o.logits = true;
  o.sample = true;
  sampling::SamplerParams greedy;
  greedy.temperature = 0;
  o.samplers.push_back({0, greedy, {}});
  exec::RunOutput out;
  ASSERT_TRUE(e.Run(b, o, &out).ok());
  ASSERT_EQ(out.n_rows, 12);
  ASSERT_EQ(out.tokens.size(), 12u);  // every marked row sampled
  logits->assign(out.logits, out.logits + out.n_rows * V);
  int32_t pos = 12;
  for (int i = 0; i < steps; ++i) {
    tokens->push_back(out.token);
    model::Batch step;
    step.Add(forced != nullptr ? (*forced)[i] : out.token, pos++, 0, true);
    exec::RunOptions so;
    so.sample = true;
    so.logits = true;
    Status st = e.Run(step, so, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    logits->insert(logits->end(), out.logits, out.logits + V);
  }
}

TEST(PipelineTest, OneTwoThreeWorkersMatchTheSingleNodeExactly) {
  for (const char* name : {"stories260K.gguf", "tiny-q4_k_m.gguf", "tiny-qwen3-q8_0.gguf", "tiny-gemma3-q4_k_m.gguf",
                           "tiny-qwen3moe-q4_k_m.gguf"}) {
    SCOPED_TRACE(name);
    const std::string path = Model(name);
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
    Result<model::Model> m = model::Model::Load(path);
    ASSERT_TRUE(m.ok());
    // Every node copies its weights into memory (the default, --no-mmap), Q4_0, Q5_0, Q8_0 and Q4_K
    // ones into the interleaved layout: the single node does too, for the same arithmetic.
    ASSERT_TRUE(m->CopyIntoMemory(0, m->params().n_layer, true).ok());
    std::vector<float> want_logits;
    std::vector<int32_t> want_tokens;
    // 60 steps: past tiny-gemma3's window (16) and rollback margin (32), so every stage's
    // sliding-window layers drop cells as the single node's do.
    constexpr int kSteps = 60;
    {
      exec::LocalExecutor local(*m, 128, 1, /*ubatch=*/5);
      RunAll(local, &want_logits, &want_tokens, kSteps);
    }
    for (int nw = 1; nw <= 3; ++nw) {
      SCOPED_TRACE(nw);
      std::vector<std::unique_ptr<TestWorker>> workers;
      ExecutorOptions o;
      for (int i = 0; i < nw; ++i) {
        workers.push_back(std::make_unique<TestWorker>());
        o.workers.push_back(workers.back()->addr());
      }
      o.n_ctx = 128;
      o.threads = 1;
      o.ubatch = 5;  // the 12-token prompt travels as 3 micro-batches
      o.log = [](const std::string&) {};
      Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(*m, path, o);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      EXPECT_EQ((*c)->weight_bytes_received(), 0u);
      std::vector<float> got_logits;
      std::vector<int32_t> got_tokens;
      RunAll(**c, &got_logits, &got_tokens, kSteps);
      EXPECT_EQ(got_tokens, want_tokens);
      ASSERT_EQ(got_logits.size(), want_logits.size());
      size_t diff = 0;
      for (size_t i = 0; i < got_logits.size(); ++i) diff += got_logits[i] != want_logits[i];
      EXPECT_EQ(diff, 0u) << "logits differ from the single-node run";
    }
  }
}

// A pipeline with GPU stages (the first Vulkan device: lavapipe in CI): the main node runs the
// last of its layers on the GPU (-ngl 1) and the last worker all of its layers and the head; the
// middle worker stays on its CPU. Fed the single CPU node's tokens, the pipeline's logits are that
// node's within the reference README's bound for float weights (max KL 1e-3) and, the GPU
// computing with float activations where the CPU quantizes them, its bound for quantized ones
// (max KL 5e-2); the float model's greedy tokens are the same.
TEST(PipelineTest, GpuAndCpuStagesGiveTheSingleNodeLogits) {
  Result<gpu::DeviceChoice> gpu = gpu::ChooseDevice("Vulkan0");
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString() << " (scripts/install-deps.sh installs lavapipe)";
  for (const char* name : {"tiny-f16.gguf", "tiny-q4_k_m.gguf", "tiny-gemma3-q4_k_m.gguf"}) {
    SCOPED_TRACE(name);
    const std::string path = Model(name);
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
    Result<model::Model> m = model::Model::Load(path);
    ASSERT_TRUE(m.ok());
    std::vector<float> want_logits;
    std::vector<int32_t> want_tokens;
    constexpr int kSteps = 40;  // past tiny-gemma3's window of 16
    {
      exec::LocalExecutor local(*m, 128, 1, /*ubatch=*/5);
      RunAll(local, &want_logits, &want_tokens, kSteps);
    }
    WorkerOptions cpu_worker, gpu_worker;
    cpu_worker.use_main_path = gpu_worker.use_main_path = true;
    gpu_worker.device = gpu->device;
    gpu_worker.gpu_layers = -1;
    TestWorker a(cpu_worker), b(gpu_worker);
    ExecutorOptions o;
    o.workers = {a.addr(), b.addr()};
    o.n_ctx = 128;
    o.threads = 1;
    o.ubatch = 5;
    o.use_mmap = true;
    o.plan.layers = "0-1,2-2,3-3";
    o.context.device = gpu->device;
    o.context.gpu_layers = 1;
    o.log = [](const std::string&) {};
    if (m->params().n_layer == 7) o.plan.layers = "0-2,3-4,5-6";
    Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(*m, path, o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    std::vector<float> got_logits;
    std::vector<int32_t> got_tokens;
    RunAll(**c, &got_logits, &got_tokens, kSteps, &want_tokens);
    ASSERT_EQ(got_logits.size(), want_logits.size());
    const bool is_float = std::string(name) == "tiny-f16.gguf";
    const double kl = testing::MaxKl(want_logits, got_logits, m->params().n_vocab);
    std::printf("%s: max KL %.2e against the single CPU node\n", name, kl);
    EXPECT_LE(kl, is_float ? 1e-3 : 5e-2);
    EXPECT_GT(kl, 0.0) << "bit-equal to the CPU: the GPU stages did not compute (CPU pipelines are bit-equal)";
    if (is_float) {
      EXPECT_EQ(got_tokens, want_tokens);
    }
  }
}

// A worker whose GPU is lost in the middle of a session (injected: lavapipe does not fail): the
// main node's step fails with an error naming the device, the worker keeps serving, and the next
// session runs on the device opened anew: the same logits as the first session (which differ
// from the CPU's, PipelineTest.GpuAndCpuStagesGiveTheSingleNodeLogits, so the GPU computed them).
TEST(PipelineTest, AWorkerWhoseGpuIsLostSaysSoAndServesTheNextSessionOnItOpenedAgain) {
  const std::string path = Model("tiny-q4_k_m.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  Result<gpu::DeviceChoice> gpu = gpu::ChooseDevice("Vulkan0");  // the worker's own Device
  ASSERT_TRUE(gpu.ok() && gpu->device != nullptr) << gpu.status().ToString();
  WorkerOptions wo;
  wo.use_main_path = true;
  wo.device = gpu->device;
  wo.gpu_layers = -1;
  TestWorker w(wo);
  ExecutorOptions o;
  o.workers = {w.addr()};
  o.n_ctx = 64;
  o.threads = 1;
  o.use_mmap = true;
  o.log = [](const std::string&) {};
  std::vector<float> first_logits, again_logits;
  std::vector<int32_t> first_tokens, again_tokens;
  {
    Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(*m, path, o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    RunAll(**c, &first_logits, &first_tokens, 4);
    gpu->device->InjectFaultForTesting(gpu::Device::Fault::kDeviceLost);
    model::Batch step;
    step.Add(first_tokens.back(), 16, 0, true);
    exec::RunOptions so;
    so.logits = true;
    exec::RunOutput out;
    const Status st = (*c)->Run(step, so, &out);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("Vulkan0"), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("VK_ERROR_DEVICE_LOST"), std::string::npos) << st.ToString();
  }
  Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(*m, path, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  RunAll(**c, &again_logits, &again_tokens, 4);
  EXPECT_EQ(again_tokens, first_tokens);
  EXPECT_EQ(again_logits, first_logits);
}

// A worker runs a Forward of at most 4 tokens on its reader thread when its session is idle, and
// queues everything else behind the task that runs. Here the first worker holds almost every
// layer, so the main node's micro-batches of 5, 5 and 2 tokens reach it while it computes: the
// 2-token one must still wait its turn (run early, it would attend to a cache without its
// predecessors' rows). Checked to fail (2 runs of 3) when small Forwards jump the queue.
TEST(PipelineTest, SmallAndLargeMicroBatchesRunInOrder) {
  const std::string path = Model("tiny-q4_k_m.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  // Every node copies its weights (the default), Q4_0 / Q5_0 / Q8_0 / Q4_K ones into the interleaved layout:
  // the single node does too, for the same arithmetic.
  ASSERT_TRUE(m->CopyIntoMemory(0, m->params().n_layer, true).ok());
  std::vector<float> want_logits, got_logits;
  std::vector<int32_t> want_tokens, got_tokens;
  {
    exec::LocalExecutor local(*m, 64, 1, /*ubatch=*/5);
    RunAll(local, &want_logits, &want_tokens);
  }
  TestWorker a, b;
  ExecutorOptions o;
  o.workers = {a.addr(), b.addr()};
  o.n_ctx = 64;
  o.threads = 1;
  o.ubatch = 5;  // the 12-token prompt travels as micro-batches of 5, 5 and 2 tokens
  // One layer on the main node and all but one on the first worker, so the main node sends
  // faster than that worker computes and micro-batches queue up behind the one running.
  const int64_t nl = m->params().n_layer;
  ASSERT_GE(nl, 3);
  o.plan.layers = "0-0,1-" + std::to_string(nl - 2) + "," + std::to_string(nl - 1) + "-" +
                  std::to_string(nl - 1);
  o.log = [](const std::string&) {};
  Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(*m, path, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  RunAll(**c, &got_logits, &got_tokens);
  EXPECT_EQ(got_tokens, want_tokens);
  EXPECT_EQ(got_logits, want_logits);
}

// Clear, truncate and rerun: the operations a server and speculative decoding need. The
// pipeline must give exactly what one node gives for the same script.
std::vector<std::vector<float>> ClearTruncateScript(exec::Executor& e, Status* overflow) {
  std::vector<std::vector<float>> seen;
  const int64_t V = e.params().n_vocab;
  exec::RunOptions lo;
  lo.logits = true;
  exec::RunOutput out;
  model::Batch b = Prompt(20, static_cast<int>(V));
  b.logits.assign(20, 0);
  b.logits.back() = 1;
  auto run = [&](const model::Batch& x, const exec::RunOptions& o) {
    Status st = e.Run(x, o, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (st.ok()) seen.emplace_back(out.logits, out.logits + V);
  };
  run(b, lo);
  // The same 20 tokens again overflow a 32-cell context unless the clear reaches every stage.
  EXPECT_TRUE(e.Clear().ok());
  run(b, lo);
  // Rewind to position 10 and recompute the rest.
  model::Batch tail;
  for (int i = 10; i < 20; ++i) tail.Add(b.tokens[i], i, 0, i == 19);
  lo.truncate = {{0, 10}};
  run(tail, lo);
  // Without a clear the context overflows.
  lo.truncate.clear();
  *overflow = e.Run(b, lo, &out);
  return seen;
}

TEST(PipelineTest, ClearAndTruncateTravelWithTheData) {
  const std::string path = Model("stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  Status local_overflow, dist_overflow;
  std::vector<std::vector<float>> want;
  {
    exec::LocalExecutor local(*m, 32, 1, 128);
    want = ClearTruncateScript(local, &local_overflow);
  }
  ASSERT_EQ(want.size(), 3u);
  ASSERT_FALSE(local_overflow.ok());
  // Rewinding reproduces the first run's logits closely (the batch composition differs).
  for (size_t i = 0; i < want[0].size(); ++i) ASSERT_NEAR(want[2][i], want[0][i], 1e-3);
  TestWorker w1, w2;
  ExecutorOptions o;
  o.workers = {w1.addr(), w2.addr()};
  o.n_ctx = 32;
  o.threads = 1;
  o.log = [](const std::string&) {};
  Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(*m, path, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(ClearTruncateScript(**c, &dist_overflow), want);
  // The overflow is a clear error naming the context, no hang.
  ASSERT_FALSE(dist_overflow.ok());
  EXPECT_NE(dist_overflow.message().find("context is full"), std::string::npos) << dist_overflow.ToString();
}

TEST(PipelineTest, WorkerWithoutTheFileReceivesItsLayersOnceAndThenUsesTheCache) {
  const std::string path = Model("tiny-q4_k_m.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  // Every node copies its weights (the default), Q4_0 / Q5_0 / Q8_0 / Q4_K ones into the interleaved layout:
  // the single node does too, for the same arithmetic.
  ASSERT_TRUE(m->CopyIntoMemory(0, m->params().n_layer, true).ok());
  std::vector<float> want_logits;
  std::vector<int32_t> want_tokens;
  {
    exec::LocalExecutor local(*m, 64, 1, 5);
    RunAll(local, &want_logits, &want_tokens);
  }
  const std::string cache = ::testing::TempDir() + "tandem_cache_" + std::to_string(getpid());
  std::filesystem::remove_all(cache);
  TestWorker w1(std::nullopt, cache + "/a"), w2(std::nullopt, cache + "/b");
  ExecutorOptions o;
  o.workers = {w1.addr(), w2.addr()};
  o.n_ctx = 64;
  o.threads = 1;
  o.ubatch = 5;
  o.log = [](const std::string&) {};
  uint64_t first_bytes = 0;
  for (int start = 0; start < 3; ++start) {
    SCOPED_TRACE(start);
    if (start == 2) {
      // A corrupted cache entry is detected (digest) and replaced by a fresh transfer.
      for (const auto& e : std::filesystem::directory_iterator(cache + "/b")) {
        if (e.path().extension() != ".gguf") continue;
        std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(e.path()) - 100));
        f.put('\x5a');
      }
    }
    Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(*m, path, o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const uint64_t moved = (*c)->weight_bytes_received();
    if (start == 0) {
      first_bytes = moved;
      EXPECT_GT(moved, 0u);
      EXPECT_LT(moved, std::filesystem::file_size(path));  // only the workers' layers
    } else if (start == 1) {
      EXPECT_EQ(moved, 0u) << "a restarted worker with a cached copy moves no weights";
    } else {
      EXPECT_GT(moved, 0u);
      EXPECT_LT(moved, first_bytes);  // only worker b's share was sent again
    }
    std::vector<float> got_logits;
    std::vector<int32_t> got_tokens;
    RunAll(**c, &got_logits, &got_tokens);
    EXPECT_EQ(got_tokens, want_tokens);
    EXPECT_EQ(got_logits, want_logits);
    c->reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // workers free the session
  }
  std::filesystem::remove_all(cache);
}

TEST(PipelineTest, WorkerWithoutTheFileOrACacheSaysWhatToDo) {
  const std::string path = Model("stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  WorkerOptions wo;
  wo.port = 0;
  wo.use_main_path = false;
  wo.log = [](const std::string&) {};
  Result<std::unique_ptr<Worker>> w = Worker::Start(wo);
  ASSERT_TRUE(w.ok());
  std::thread t([&] { (*w)->Serve(); });
  ExecutorOptions o;
  o.workers = {"127.0.0.1:" + std::to_string((*w)->port())};
  o.n_ctx = 16;
  o.log = [](const std::string&) {};
  Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(*m, path, o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--cache-dir"), std::string::npos) << c.status().ToString();
  (*w)->Stop();
  t.join();
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

TEST(PipelineTest, AnIdlePipelineSleeps) {
  const std::string path = Model("stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  TestWorker w1, w2;
  ExecutorOptions o;
  o.workers = {w1.addr(), w2.addr()};
  o.n_ctx = 32;
  o.threads = 2;
  o.log = [](const std::string&) {};
  Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(*m, path, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  RunAll(**c, &logits, &tokens);  // every thread has run at least once
  const double cpu0 = CpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double used = CpuSeconds() - cpu0;
  // Main node, two workers, their pools, readers, senders and heartbeats, all waiting: they
  // may wake for pings (every 500 ms) but must not spin.
  EXPECT_LT(used, 0.05) << "an idle pipeline used " << used << " s of CPU in 1 s";
}

// A main node may ping as soon as its handshake ends (it measures the round trip): the session
// answers at once. (Its reader once handled a frame before the session had stored the
// connection, and the worker crashed on the Pong.) Each main node connects as soon as the one
// before it has ended its session: it is served, not refused as busy (the worker waits for a
// session that is ending).
TEST(PipelineTest, APingRightAfterTheHandshakeIsAnswered) {
  TestWorker w;
  for (int i = 0; i < 200; ++i) {
    SCOPED_TRACE(i);
    Result<net::Socket> s = net::Socket::Connect("127.0.0.1", w.w->port(), 2000);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Result<net::WorkerInfo> info = net::ClientHandshake(*s, net::Role::kMainNode, std::nullopt);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    ASSERT_TRUE(net::WriteMessage(*s, net::MsgType::kPing, net::Ping{7}).ok());
    Result<net::Ping> pong = net::ReadMessage<net::Ping>(*s, net::MsgType::kPong, 3000);
    ASSERT_TRUE(pong.ok()) << pong.status().ToString();
    EXPECT_EQ(pong->id, 7u);
    (void)net::WriteMessage(*s, net::MsgType::kEndSession, net::Empty{});
  }
}

TEST(PipelineTest, BusyWorkerRefusesASecondMainNode) {
  const std::string path = Model("stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  TestWorker w;
  ExecutorOptions o;
  o.workers = {w.addr()};
  o.n_ctx = 16;
  o.log = [](const std::string&) {};
  Result<std::unique_ptr<Coordinator>> first = Coordinator::Open(*m, path, o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<std::unique_ptr<Coordinator>> second = Coordinator::Open(*m, path, o);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("busy"), std::string::npos) << second.status().ToString();
  first->reset();
  // Once the first session is gone the worker serves again.
  // (The worker frees the session asynchronously; a main node that connects meanwhile waits for it.)
  Result<std::unique_ptr<Coordinator>> third = Coordinator::Open(*m, path, o);
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

TEST(PipelineTest, WrongKeyIsRefused) {
  const std::string path = Model("stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  net::Key k1, k2;
  k1.fill(1);
  k2.fill(2);
  TestWorker w(k1);
  ExecutorOptions o;
  o.workers = {w.addr()};
  o.n_ctx = 16;
  o.key = k2;
  o.log = [](const std::string&) {};
  Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(*m, path, o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("wrong key"), std::string::npos) << c.status().ToString();
  o.key = k1;
  c = Coordinator::Open(*m, path, o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

TEST(PipelineTest, RefusesNonLoopbackWithoutKey) {
  WorkerOptions o;
  o.host = "0.0.0.0";
  o.port = 0;
  Result<std::unique_ptr<Worker>> w = Worker::Start(o);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("--auth-key-file"), std::string::npos);
  o.insecure = true;
  o.log = [](const std::string&) {};
  EXPECT_TRUE(Worker::Start(o).ok());
}

}  // namespace
}  // namespace tandem::pipeline

namespace tandem::pipeline {
namespace {

// Connections beyond --max-connections are closed before a byte of theirs is read: 8 idle
// connections against a worker allowing 4 leave 4 waiting in their handshakes and the rest
// closed; once the idle ones go, the worker serves again (main before this change gave every
// connection a thread and a buffer sized by whatever header it sent).
TEST(PipelineTest, ConnectionsBeyondTheLimitAreClosedUnread) {
  WorkerOptions o;
  o.port = 0;
  o.threads = 1;
  o.max_connections = 4;
  o.log = [](const std::string&) {};
  Result<std::unique_ptr<Worker>> w = Worker::Start(o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::thread serve([&] { (*w)->Serve(); });
  std::vector<net::Socket> idle;
  int closed = 0;
  for (int i = 0; i < 8; ++i) {
    Result<net::Socket> s = net::Socket::Connect("127.0.0.1", (*w)->port(), 2000);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    uint8_t byte = 0;
    // A connection over the limit is closed at once; one within it waits for its Hello.
    if (!s->RecvAll(std::span(&byte, 1), 250).ok() && i >= 4) {
      Result<net::WorkerInfo> info = net::ClientHandshake(*s, net::Role::kProbe, std::nullopt, 500);
      if (!info.ok()) ++closed;
    }
    idle.push_back(std::move(*s));
  }
  EXPECT_EQ(closed, 4) << "connections 5-8 should have been closed unread";
  idle.clear();  // the 4 waiting handshakes fail at once
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Result<net::Socket> s = net::Socket::Connect("127.0.0.1", (*w)->port(), 2000);
  ASSERT_TRUE(s.ok());
  Result<net::WorkerInfo> info = net::ClientHandshake(*s, net::Role::kProbe, std::nullopt, 2000);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  s->Close();
  (*w)->Stop();
  serve.join();
}

// Finding 3's flood: 16 clients that have not authenticated each announce a 64 MiB Hello and
// send a MiB of it. The worker reads each Hello into exactly its size, so its memory stays where
// it was (each would have cost 64 MiB before: a buffer sized by the header).
TEST(PipelineTest, APreAuthFloodKeepsTheWorkersMemoryBounded) {
  WorkerOptions o;
  o.port = 0;
  o.threads = 1;
  net::Key key;
  key.fill(3);
  o.key = key;
  o.log = [](const std::string&) {};
  Result<std::unique_ptr<Worker>> w = Worker::Start(o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::thread serve([&] { (*w)->Serve(); });
  const uint64_t before = sys::PeakResidentBytes();
  ASSERT_GT(before, 0u);
  std::vector<uint8_t> flood(1 << 20, 0xab);
  const uint32_t announced = 64u << 20;
  const uint16_t type = static_cast<uint16_t>(net::MsgType::kHello);
  std::memcpy(flood.data(), &announced, 4);
  std::memcpy(flood.data() + 4, &type, 2);
  std::memset(flood.data() + 6, 0, 2);
  std::vector<net::Socket> clients;
  for (int i = 0; i < 16; ++i) {
    Result<net::Socket> s = net::Socket::Connect("127.0.0.1", (*w)->port(), 2000);
    ASSERT_TRUE(s.ok());
    (void)s->SendAll(flood);  // the worker may close it before all of it arrives
    clients.push_back(std::move(*s));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const uint64_t after = sys::PeakResidentBytes();
  EXPECT_LT(after - before, uint64_t{64} << 20) << "peak resident memory grew by " << ((after - before) >> 20) << " MiB";
  clients.clear();
  (*w)->Stop();
  serve.join();
}

}  // namespace
}  // namespace tandem::pipeline
