// Multi-process tests of `tandem worker` and the pipeline: real processes on loopback.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "linkemu/link_emulator.h"
#include "net/socket.h"
#include "process_support.h"
#include "test_support.h"

namespace tandem::testing {
namespace {

std::string ModelPath(const char* name) {
  return (SharedDir() / "reference/models" / name).string();
}

std::string Addr(int port) { return "127.0.0.1:" + std::to_string(port); }

// A link emulator on a free port in front of the worker at `port`, adding `delay_ms` each way.
auto SlowLinkTo(int port, int delay_ms = 20) {
  linkemu::LinkConfig c;
  c.delay_ms = delay_ms;
  return linkemu::LinkEmulator::Start("127.0.0.1", 0, "127.0.0.1", port, c);
}

// Runs `args` with `n` fresh workers appended as --worker flags (every one used: --plan memory).
RunResult RunOverWorkers(std::vector<std::string> args, int n) {
  std::vector<std::unique_ptr<Process>> workers;
  args.insert(args.end(), {"--plan", "memory"});
  for (int i = 0; i < n; ++i) {
    int port = 0;
    workers.push_back(StartWorker({}, &port));
    if (port == 0) return {true, 99, "", "worker did not start: " + workers.back()->err()};
    args.push_back("--worker");
    args.push_back(Addr(port));
  }
  return RunTandem(args);
}

TEST(DistCliTest, LogitsWithOneTwoThreeWorkersEqualTheSingleNode) {
  const std::string model = ModelPath("tiny-q4_k_m.gguf");
  TANDEM_REQUIRE_SHARED(model);
  const std::vector<std::string> base = {"logits", "-m", model, "-p", "Hello world, this is tandem", "--greedy", "6", "-t", "1"};
  RunResult single = RunTandem(base);
  ASSERT_EQ(single.code, 0) << single.err;
  const nlohmann::json want = nlohmann::json::parse(single.out);
  for (int nw = 1; nw <= 3; ++nw) {
    SCOPED_TRACE(nw);
    std::vector<std::unique_ptr<Process>> workers;
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--plan", "memory"});  // every worker holds layers
    for (int i = 0; i < nw; ++i) {
      int port = 0;
      workers.push_back(StartWorker({}, &port));
      ASSERT_NE(port, 0) << workers.back()->err();
      args.push_back("--worker");
      args.push_back(Addr(port));
    }
    RunResult r = RunTandem(args);
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json got = nlohmann::json::parse(r.out);
    EXPECT_EQ(got["greedy"], want["greedy"]);
    EXPECT_EQ(got["prompt_tokens"], want["prompt_tokens"]);
    EXPECT_EQ(got["logits"], want["logits"]) << "logits differ from the single-node run";
    EXPECT_NE(r.err.find("placement"), std::string::npos) << r.err;  // the plan is printed
  }
}

TEST(DistCliTest, GreedyRunEqualsTheSingleNodeText) {
  const std::string model = ModelPath("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(model);
  const std::vector<std::string> base = {"run", "-m", model, "-p", "Once upon a time", "-n", "60", "--temp", "0", "-t", "1"};
  RunResult single = RunTandem(base);
  ASSERT_EQ(single.code, 0) << single.err;
  int p1 = 0, p2 = 0;
  auto w1 = StartWorker({}, &p1);
  auto w2 = StartWorker({}, &p2);
  ASSERT_TRUE(p1 && p2);
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--plan", "memory", "--worker", Addr(p1), "--worker", Addr(p2)});
  RunResult r = RunTandem(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, single.out);
  // Seeded sampling gives the same text as one node too (the sampler runs on the last stage).
  std::vector<std::string> seeded = {"run", "-m", model, "-p", "Once upon a time", "-n", "40", "--temp", "0.9", "-s", "7", "-t", "1"};
  RunResult s1 = RunTandem(seeded);
  seeded.insert(seeded.end(), {"--plan", "memory", "--worker", Addr(p1), "--worker", Addr(p2)});
  RunResult s2 = RunTandem(seeded);
  ASSERT_EQ(s1.code, 0);
  ASSERT_EQ(s2.code, 0) << s2.err;
  EXPECT_EQ(s1.out, s2.out);
}

TEST(DistCliTest, WithNoResumeAKilledWorkerGivesACleanErrorNamingItWithinThreeSeconds) {
  const std::string model = ModelPath("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(model);
  int p1 = 0, p2 = 0;
  auto w1 = StartWorker({}, &p1);
  auto w2 = StartWorker({}, &p2);
  ASSERT_TRUE(p1 && p2);
  // Each hop 20 ms slower, so that generation lasts seconds and the kill lands mid-way.
  auto e1 = SlowLinkTo(p1);
  auto e2 = SlowLinkTo(p2);
  ASSERT_TRUE(e1.ok() && e2.ok());
  Process run({"run", "-m", model, "-p", "Once upon a time", "-n", "400", "--temp", "0", "-t", "1",
               "--plan", "memory", "--worker", Addr((*e1)->port()), "--worker", Addr((*e2)->port()), "--no-resume"});
  ASSERT_TRUE(run.WaitForOutput(" ", 30)) << run.err();  // text is streaming
  const auto t0 = std::chrono::steady_clock::now();
  w2->Kill(SIGKILL);
  ASSERT_TRUE(run.Wait(10)) << "the main node hangs after a worker died";
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 3.0);
  EXPECT_EQ(run.exit_code(), 1);
  const std::string err = run.err();
  EXPECT_NE(err.find("worker " + Addr((*e2)->port())), std::string::npos) << err;
  // The surviving worker frees the session and serves a new client.
  RunResult again = RunTandem({"logits", "-m", model, "-p", "Hi", "--greedy", "2", "--plan", "memory", "--worker", Addr(p1)});
  for (int i = 0; i < 20 && again.code != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    again = RunTandem({"logits", "-m", model, "-p", "Hi", "--greedy", "2", "--plan", "memory", "--worker", Addr(p1)});
  }
  EXPECT_EQ(again.code, 0) << again.err;
}

TEST(DistCliTest, WorkersSurviveTheMainNodeCrashing) {
  const std::string model = ModelPath("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(model);
  int p1 = 0, p2 = 0;
  auto w1 = StartWorker({}, &p1);
  auto w2 = StartWorker({}, &p2);
  ASSERT_TRUE(p1 && p2);
  auto e1 = SlowLinkTo(p1);
  ASSERT_TRUE(e1.ok());
  {
    Process run({"run", "-m", model, "-p", "Once upon a time", "-n", "400", "--temp", "0", "-t", "1",
                 "--plan", "memory", "--worker", Addr((*e1)->port()), "--worker", Addr(p2)});
    ASSERT_TRUE(run.WaitForOutput(" ", 30)) << run.err();
    run.Kill(SIGKILL);  // the main node dies mid-generation
  }
  // Both workers free the session and serve the next main node.
  RunResult again = RunTandem({"logits", "-m", model, "-p", "Hi", "--greedy", "2", "--plan", "memory", "--worker", Addr(p1), "--worker", Addr(p2)});
  for (int i = 0; i < 30 && again.code != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    again = RunTandem({"logits", "-m", model, "-p", "Hi", "--greedy", "2", "--plan", "memory", "--worker", Addr(p1), "--worker", Addr(p2)});
  }
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(w1->running());
  EXPECT_TRUE(w2->running());
}

TEST(DistCliTest, WithNoResumeAStalledLinkIsDetectedWithinThreeSeconds) {
  const std::string model = ModelPath("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(model);
  int p1 = 0, p2 = 0;
  auto w1 = StartWorker({}, &p1);
  auto w2 = StartWorker({}, &p2);
  ASSERT_TRUE(p1 && p2);
  auto e2 = SlowLinkTo(p2);
  ASSERT_TRUE(e2.ok());
  Process run({"run", "-m", model, "-p", "Once upon a time", "-n", "400", "--temp", "0", "-t", "1",
               "--plan", "memory", "--worker", Addr(p1), "--worker", Addr((*e2)->port()), "--no-resume"});
  ASSERT_TRUE(run.WaitForOutput(" ", 30)) << run.err();
  const auto t0 = std::chrono::steady_clock::now();
  (*e2)->Stall(true);  // both links to worker 2 go silent, the processes stay up
  ASSERT_TRUE(run.Wait(10)) << "the main node hangs on a silent link";
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 3.5);
  EXPECT_EQ(run.exit_code(), 1);
  EXPECT_NE(run.err().find("worker"), std::string::npos) << run.err();
  (*e2)->Stall(false);
}

TEST(DistCliTest, WorkerSurvivesGarbageThenServesARealClient) {
  const std::string model = ModelPath("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(model);
  int port = 0;
  auto w = StartWorker({}, &port);
  ASSERT_NE(port, 0);
  std::mt19937 rng(5);
  for (int round = 0; round < 20; ++round) {
    Result<net::Socket> s = net::Socket::Connect("127.0.0.1", static_cast<uint16_t>(port), 2000);
    ASSERT_TRUE(s.ok());
    std::vector<uint8_t> junk(1 + rng() % 4000);
    for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
    if (round % 4 == 0) {  // a valid-looking header announcing a huge frame
      const uint32_t n = 0x7fffffff;
      std::memcpy(junk.data(), &n, std::min<size_t>(4, junk.size()));
    }
    (void)s->SendAll(junk);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(w->running()) << w->err();
  RunResult r = RunTandem({"logits", "-m", model, "-p", "Hi", "--greedy", "2", "--plan", "memory", "--worker", Addr(port)});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(w->err().find("rejected connection"), std::string::npos) << w->err();
}

// `tandem keygen` writes 32 random bytes readable by the owner only and never replaces a file; a
// key file shorter than 32 bytes (a passphrase, attackable offline from one recorded handshake)
// is refused with how to make a good one; the generated key works end to end.
TEST(DistCliTest, KeygenMakesAPrivateKeyAndShortKeysAreRefused) {
  const std::string model = ModelPath("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(model);
  const std::string dir = ::testing::TempDir();
  const std::string key = dir + "tandem_keygen." + std::to_string(getpid()), weak = key + ".weak";
  std::remove(key.c_str());
  RunResult made = RunTandem({"keygen", "-o", key});
  ASSERT_EQ(made.code, 0) << made.err;
  EXPECT_EQ(std::filesystem::status(key).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_GE(std::filesystem::file_size(key), 44u);  // base64 of 32 bytes and a newline
  RunResult again = RunTandem({"keygen", "-o", key});
  EXPECT_EQ(again.code, 1);
  EXPECT_NE(again.err.find("never replaced"), std::string::npos) << again.err;

  std::ofstream(weak) << "hunter2hunter2hunter2\n";
  RunResult refused = RunTandem({"worker", "-p", "0", "--auth-key-file", weak});
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("tandem keygen"), std::string::npos) << refused.err;

  int port = 0;
  auto w = StartWorker({"--auth-key-file", key}, &port);
  ASSERT_NE(port, 0) << w->err();
  RunResult good = RunTandem({"logits", "-m", model, "-p", "Hi", "--greedy", "1", "--plan", "memory", "--worker", Addr(port), "--auth-key-file", key});
  EXPECT_EQ(good.code, 0) << good.err;
  std::remove(key.c_str());
  std::remove(weak.c_str());
}

TEST(DistCliTest, WrongKeyIsRefusedAndTheRightKeyWorks) {
  const std::string model = ModelPath("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(model);
  const std::string dir = ::testing::TempDir();
  const std::string k1 = dir + "tandem_key1." + std::to_string(getpid()), k2 = dir + "tandem_key2." + std::to_string(getpid());
  std::ofstream(k1) << "correct horse battery staple 1 of 32+ bytes\n";
  std::ofstream(k2) << "correct horse battery staple 2 of 32+ bytes\n";
  int port = 0;
  auto w = StartWorker({"--auth-key-file", k1}, &port);
  ASSERT_NE(port, 0) << w->err();
  RunResult bad = RunTandem({"logits", "-m", model, "-p", "Hi", "--greedy", "1", "--plan", "memory", "--worker", Addr(port), "--auth-key-file", k2});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("wrong key"), std::string::npos) << bad.err;
  RunResult none = RunTandem({"logits", "-m", model, "-p", "Hi", "--greedy", "1", "--plan", "memory", "--worker", Addr(port)});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("requires a key"), std::string::npos) << none.err;
  RunResult good = RunTandem({"logits", "-m", model, "-p", "Hi", "--greedy", "1", "--plan", "memory", "--worker", Addr(port), "--auth-key-file", k1});
  EXPECT_EQ(good.code, 0) << good.err;
  std::remove(k1.c_str());
  std::remove(k2.c_str());
}

// One node and a pipeline give the same logits to the bit with their default micro-batches: a
// 100-token prompt is one 512-token pass on one node and 32-token micro-batches over 3 stages.
TEST(DistCliTest, DefaultMicroBatchesGiveTheSingleNodeLogitsBitForBit) {
  const std::string model = ModelPath("tiny-q4_k_m.gguf");
  TANDEM_REQUIRE_SHARED(model);
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "the quick brown fox jumps over the lazy dog ";
  const std::vector<std::string> base = {"logits", "-m", model, "-p", prompt, "--greedy", "2", "-t", "1"};
  RunResult single = RunTandem(base);
  ASSERT_EQ(single.code, 0) << single.err;
  const nlohmann::json want = nlohmann::json::parse(single.out);
  ASSERT_GT(want["prompt_tokens"].size(), 64u) << "the prompt must span several micro-batches";
  RunResult r = RunOverWorkers(base, 2);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["logits"], want["logits"]);
}

// `worker -p PORT` (rpc-server's spelling), `tandem probe` (reachable, key, what the worker
// reports, round trips; no session, so a run right after works), and --dry-run over workers
// (the plan, nothing loaded, the workers free again at once).
// --plan auto (the default) leaves out a worker behind a 20 ms link (its round trip costs more
// than its layers save), and runs without it with the single node's text; --plan memory uses
// it. The plan shows each stage's predicted milliseconds.
TEST(DistCliTest, AutoPlanLeavesOutAWorkerBehindASlowLink) {
  const std::string model = ModelPath("tiny-q4_k_m.gguf");
  TANDEM_REQUIRE_SHARED(model);
  int p1 = 0, p2 = 0;
  auto w1 = StartWorker({}, &p1);
  auto w2 = StartWorker({}, &p2);
  ASSERT_TRUE(p1 && p2);
  auto e2 = SlowLinkTo(p2);
  ASSERT_TRUE(e2.ok());
  const std::string far = Addr((*e2)->port());
  const std::vector<std::string> workers = {"--worker", Addr(p1), "--worker", far};
  std::vector<std::string> dry = {"run", "-m", model, "--dry-run", "-t", "1"};
  dry.insert(dry.end(), workers.begin(), workers.end());
  RunResult a = RunTandem(dry);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_TRUE(std::regex_search(a.out, std::regex("round trip [4-9][0-9]\\.[0-9]+ ms"))) << a.out;
  EXPECT_NE(a.out.find("plan by speed"), std::string::npos) << a.out;
  EXPECT_TRUE(std::regex_search(a.out, std::regex("not used \\(slower with them\\):[^\n]*" + far))) << a.out;
  EXPECT_TRUE(std::regex_search(a.out, std::regex("predicted [0-9.]+ ms per token"))) << a.out;
  dry.insert(dry.end(), {"--plan", "memory"});
  RunResult m = RunTandem(dry);
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_NE(m.out.find("plan by memory"), std::string::npos) << m.out;
  EXPECT_TRUE(std::regex_search(m.out, std::regex(far + " +[0-9]+-[0-9]+ "))) << m.out;  // it holds layers
  // A real run with the auto plan: the single node's logits.
  const std::vector<std::string> base = {"logits", "-m", model, "-p", "Hello world", "--greedy", "4", "-t", "1"};
  RunResult single = RunTandem(base);
  std::vector<std::string> args = base;
  args.insert(args.end(), workers.begin(), workers.end());
  RunResult r = RunTandem(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, single.out);
  EXPECT_EQ(w2->err().find("MiB weights"), std::string::npos) << "the far worker loaded a stage: " << w2->err();
}

TEST(DistCliTest, WorkerPortFlagProbeAndDryRun) {
  const std::string model = ModelPath("tiny-q4_k_m.gguf");
  TANDEM_REQUIRE_SHARED(model);
  const std::string dir = ::testing::TempDir();
  const std::string key = dir + "tandem_probe_key." + std::to_string(getpid());
  const std::string wrong = key + ".wrong";
  std::ofstream(key) << "a long enough probe key, number 1\n";
  std::ofstream(wrong) << "a long enough probe key, number 2\n";
  // A free port for -p: bind one, read it, let it go.
  int port = 0;
  {
    Result<net::Listener> l = net::Listener::Bind("127.0.0.1", 0);
    ASSERT_TRUE(l.ok());
    port = l->port();
  }
  Process w({"worker", "-p", std::to_string(port), "-t", "1", "--auth-key-file", key, "--allow-main-path"});
  ASSERT_TRUE(w.WaitForOutput("listening on 127.0.0.1:" + std::to_string(port), 30)) << w.out() << w.err();

  RunResult probe = RunTandem({"probe", Addr(port), "--auth-key-file", key, "--pings", "5"});
  ASSERT_EQ(probe.code, 0) << probe.err;
  EXPECT_NE(probe.out.find("key accepted"), std::string::npos) << probe.out;
  EXPECT_NE(probe.out.find("Q4_K matvec"), std::string::npos) << probe.out;
  EXPECT_NE(probe.out.find("idle"), std::string::npos) << probe.out;
  EXPECT_NE(probe.out.find("(5 pings)"), std::string::npos) << probe.out;
  // The workers as run takes them, so that a run's flags can be pasted: --worker, --rpc.
  for (const std::vector<std::string>& spelled : {std::vector<std::string>{"--worker", Addr(port)},
                                                   std::vector<std::string>{"--rpc", Addr(port) + ",127.0.0.1:1"}}) {
    std::vector<std::string> args = {"probe", "--auth-key-file", key, "--pings", "1", "--timeout-ms", "500"};
    args.insert(args.end(), spelled.begin(), spelled.end());
    RunResult flagged = RunTandem(args);
    EXPECT_NE(flagged.out.find(Addr(port) + ": reachable"), std::string::npos) << flagged.out << flagged.err;
    const bool second = spelled[0] == "--rpc";  // the list's second worker is not there
    EXPECT_EQ(flagged.code, second ? 1 : 0) << flagged.err;
    EXPECT_EQ(flagged.err.find("127.0.0.1:1 is not reachable") != std::string::npos, second) << flagged.err;
  }
  RunResult none = RunTandem({"probe"});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("probe needs a worker"), std::string::npos) << none.err;
  RunResult bad_key = RunTandem({"probe", Addr(port), "--auth-key-file", wrong});
  EXPECT_EQ(bad_key.code, 1);
  EXPECT_NE(bad_key.err.find("wrong key"), std::string::npos) << bad_key.err;
  RunResult nobody = RunTandem({"probe", "127.0.0.1:1", "--timeout-ms", "500"});
  EXPECT_EQ(nobody.code, 1);
  EXPECT_NE(nobody.err.find("not reachable"), std::string::npos) << nobody.err;

  RunResult dry = RunTandem({"run", "-m", model, "-p", "Hello", "--dry-run", "--plan", "memory", "--worker", Addr(port),
                             "--auth-key-file", key, "-ts", "1,3"});
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_NE(dry.out.find("placement"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find(Addr(port)), std::string::npos) << dry.out;
  EXPECT_EQ(w.err().find("MiB weights"), std::string::npos) << "the worker loaded a stage: " << w.err();
  // The dry run ended its session: a real run is served right away.
  RunResult real = RunTandem({"logits", "-m", model, "-p", "Hello", "--greedy", "1", "--plan", "memory", "--worker", Addr(port),
                              "--auth-key-file", key});
  EXPECT_EQ(real.code, 0) << real.err;
  std::remove(key.c_str());
  std::remove(wrong.c_str());
}

// A main node may only use the models a worker was told about: without --allow-main-path the
// path it names for its own copy is not opened (main before this change opened any path a main
// node named), and the refusal does not read back the worker's --models-dir listing (it did).
TEST(DistCliTest, AMainNodeCannotMakeAWorkerOpenOtherPaths) {
  const std::string model = ModelPath("tiny-q4_k_m.gguf"), other = ModelPath("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(model);
  const std::string dir = ::testing::TempDir() + "tandem_models." + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink(other, dir + "/private-notes.gguf");
  Process w({"worker", "--port", "0", "-t", "1", "--models-dir", dir});
  ASSERT_TRUE(w.WaitForOutput("listening on", 30)) << w.err();
  const std::string o = w.out();
  const int port = std::stoi(o.substr(o.find("127.0.0.1:") + 10));
  RunResult r = RunTandem({"logits", "-m", model, "-p", "Hello", "--greedy", "1", "--plan", "memory", "--worker", Addr(port)});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("has no copy of tiny-q4_k_m.gguf"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("private-notes"), std::string::npos) << "the worker's files were read back: " << r.err;
  EXPECT_NE(w.err().find("private-notes"), std::string::npos) << "the worker's own log says what it tried";
  std::filesystem::remove_all(dir);
}

TEST(DistCliTest, WorkerRefusesAPublicAddressWithoutAKey) {
  RunResult r = RunTandem({"worker", "--host", "0.0.0.0", "--port", "0"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--auth-key-file"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tandem::testing
