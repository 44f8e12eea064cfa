// Multi-process tests of resumption (pipeline/resuming_executor.h): a worker killed with
// SIGKILL, or its links cut, at a random point of a generation; the run goes on over the nodes
// still up and prints exactly the text of an undisturbed run. Every node is a real process on
// loopback; link emulators add 5 ms per hop so that a 400-token generation lasts seconds.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <regex>
#include <thread>

#include "linkemu/link_emulator.h"
#include "process_support.h"
#include "test_support.h"

namespace tandem::testing {
namespace {

std::string ModelPath(const char* name) { return (SharedDir() / "reference/models" / name).string(); }
std::string Addr(int port) { return "127.0.0.1:" + std::to_string(port); }

// A worker behind a link emulator: the main node and the upstream stage reach it through the
// emulator, so the emulator can cut or slow its links while the worker process stays up.
struct Node {
  std::unique_ptr<Process> worker;
  int port = 0;
  std::unique_ptr<linkemu::LinkEmulator> link;
  std::string addr() const { return Addr(link->port()); }
};

Node StartNode(double delay_ms = 5) {
  Node n;
  n.worker = StartWorker({}, &n.port);
  EXPECT_NE(n.port, 0) << n.worker->err();
  linkemu::LinkConfig c;
  c.delay_ms = delay_ms;
  auto e = linkemu::LinkEmulator::Start("127.0.0.1", 0, "127.0.0.1", n.port, c);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (e.ok()) n.link = std::move(*e);
  return n;
}

// Waits until the run has printed at least `chars` characters (or ended).
bool WaitForChars(Process& p, size_t chars, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    if (p.out().size() >= chars) return true;
    if (!p.running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

bool WaitForErr(Process& p, const std::string& text, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    if (p.err().find(text) != std::string::npos) return true;
    if (!p.running()) return p.err().find(text) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// A random point in the first three quarters of a text of `n` characters (the seed is printed so
// that a failure can be replayed).
size_t RandomPoint(size_t n) {
  const unsigned seed = std::random_device{}();
  std::printf("random point seed %u\n", seed);  // in the test's output when it fails
  std::mt19937 rng(seed);
  return std::uniform_int_distribution<size_t>(n / 20, n * 3 / 4)(rng);
}

const std::vector<std::string> kGreedy = {"-p", "Once upon a time", "-n", "400", "--temp", "0", "-t", "1"};

// `tandem run` of stories260K with the generation flags `gen`, then `workers` (--worker and
// --standby flags; every worker holds layers: --plan memory).
std::vector<std::string> RunArgs(const std::vector<std::string>& gen, const std::vector<std::string>& workers = {}) {
  std::vector<std::string> a = {"run", "-m", ModelPath("stories260K.gguf")};
  a.insert(a.end(), gen.begin(), gen.end());
  if (!workers.empty()) a.insert(a.end(), {"--plan", "memory"});
  a.insert(a.end(), workers.begin(), workers.end());
  return a;
}

// Waits for the run to end: it must exit 0 having printed exactly `want`. Returns its stderr.
std::string FinishedWithText(Process& run, const std::string& want) {
  EXPECT_TRUE(run.Wait(60)) << "the run did not end: " << run.err();
  EXPECT_EQ(run.exit_code(), 0) << run.err();
  EXPECT_EQ(run.out(), want);
  return run.err();
}

TEST(ResumeCliTest, AWorkerKilledMidGenerationChangesNothingInTheText) {
  TANDEM_REQUIRE_SHARED(ModelPath("stories260K.gguf"));
  const RunResult want = RunTandem(RunArgs(kGreedy));
  ASSERT_EQ(want.code, 0) << want.err;
  ASSERT_GT(want.out.size(), 400u);
  Node a = StartNode(), b = StartNode();
  Process run(RunArgs(kGreedy, {"--worker", a.addr(), "--worker", b.addr()}));
  ASSERT_TRUE(WaitForChars(run, RandomPoint(want.out.size()), 60)) << run.err();
  b.worker->Kill(SIGKILL);
  const std::string err = FinishedWithText(run, want.out);
  EXPECT_NE(err.find("lost worker " + b.addr()), std::string::npos) << err;
  // The new plan: the main node and the survivor hold every layer.
  EXPECT_TRUE(std::regex_search(err, std::regex("resumed in [0-9.]+ s .*: main layers 0-[0-9]+, " + a.addr() +
                                                " layers [0-9]+-4"))) << err;
}

TEST(ResumeCliTest, AStandbyWorkerTakesTheLostWorkersPlaceAndSeededSamplingIsUnchanged) {
  TANDEM_REQUIRE_SHARED(ModelPath("stories260K.gguf"));
  const std::vector<std::string> seeded = {"-p", "Once upon a time", "-n", "400", "--temp", "0.9", "-s", "7", "-t", "1"};
  const RunResult want = RunTandem(RunArgs(seeded));
  ASSERT_EQ(want.code, 0) << want.err;
  Node a = StartNode(), b = StartNode(), spare = StartNode();
  Process run(RunArgs(seeded, {"--worker", a.addr(), "--worker", b.addr(), "--standby", spare.addr()}));
  ASSERT_TRUE(WaitForChars(run, RandomPoint(want.out.size()), 60)) << run.err();
  a.worker->Kill(SIGKILL);
  const std::string err = FinishedWithText(run, want.out);
  EXPECT_NE(err.find("lost worker " + a.addr()), std::string::npos) << err;
  EXPECT_TRUE(std::regex_search(err, std::regex("resumed in .*" + b.addr() + " layers [0-9-]+, " + spare.addr())))
      << err;
}

TEST(ResumeCliTest, LinksCutByTheEmulatorAreResumedOver) {
  TANDEM_REQUIRE_SHARED(ModelPath("stories260K.gguf"));
  const RunResult want = RunTandem(RunArgs(kGreedy));
  ASSERT_EQ(want.code, 0) << want.err;
  Node a = StartNode(), b = StartNode();
  Process run(RunArgs(kGreedy, {"--worker", a.addr(), "--worker", b.addr()}));
  ASSERT_TRUE(WaitForChars(run, RandomPoint(want.out.size()), 60)) << run.err();
  b.link->DropAll();  // both of the second worker's links reset; the worker process stays up
  const std::string err = FinishedWithText(run, want.out);
  EXPECT_NE(err.find("resumed in"), std::string::npos) << err;
}

TEST(ResumeCliTest, AWorkerKilledDuringThePromptIsResumedWithTheSameText) {
  TANDEM_REQUIRE_SHARED(ModelPath("stories260K.gguf"));
  std::string prompt;
  for (int i = 0; i < 36; ++i) prompt += "Once upon a time there was a little girl. ";
  const std::vector<std::string> gen = {"-p", prompt, "-n", "40", "--temp", "0", "-t", "1", "-c", "512"};
  const RunResult want = RunTandem(RunArgs(gen));
  ASSERT_EQ(want.code, 0) << want.err;
  // Slow links (0.3 Mbit/s) make the prompt's hidden states take seconds to cross each hop.
  Node a = StartNode(), b = StartNode();
  linkemu::LinkConfig slow;
  slow.delay_ms = 5;
  slow.bandwidth_mbps = 0.3;
  ASSERT_TRUE(a.link->SetConfig(slow).ok());
  ASSERT_TRUE(b.link->SetConfig(slow).ok());
  Process run(RunArgs(gen, {"--worker", a.addr(), "--worker", b.addr(), "--ubatch-size", "32"}));
  ASSERT_TRUE(WaitForErr(run, "ready", 60)) << run.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  b.worker->Kill(SIGKILL);
  linkemu::LinkConfig fast;
  fast.delay_ms = 5;
  ASSERT_TRUE(a.link->SetConfig(fast).ok());
  const std::string err = FinishedWithText(run, want.out);
  // Nothing was committed yet: the prompt itself was in flight and went again.
  EXPECT_NE(err.find(", 0 tokens re-computed"), std::string::npos) << err;
}

TEST(ResumeCliTest, TwoFailuresInARowEndOnTheMainNodeAloneWithTheSameText) {
  TANDEM_REQUIRE_SHARED(ModelPath("stories260K.gguf"));
  const RunResult want = RunTandem(RunArgs(kGreedy));
  ASSERT_EQ(want.code, 0) << want.err;
  Node a = StartNode(), b = StartNode();
  Process run(RunArgs(kGreedy, {"--worker", a.addr(), "--worker", b.addr()}));
  const size_t first = RandomPoint(want.out.size() / 2);
  ASSERT_TRUE(WaitForChars(run, first, 60)) << run.err();
  b.worker->Kill(SIGKILL);
  ASSERT_TRUE(WaitForErr(run, "resumed in", 30)) << run.err();
  ASSERT_TRUE(WaitForChars(run, run.out().size() + 20, 60)) << run.err();
  a.worker->Kill(SIGKILL);
  const std::string err = FinishedWithText(run, want.out);
  EXPECT_NE(err.find("lost worker " + b.addr()), std::string::npos) << err;
  EXPECT_NE(err.find("lost worker " + a.addr()), std::string::npos) << err;
  EXPECT_TRUE(std::regex_search(err, std::regex("resumed in [^\n]*: main layers 0-4\n"))) << err;
}

}  // namespace
}  // namespace tandem::testing
