// llama.cpp's flag spellings on the `tandem` binary, one test per flag: each either does what a
// llama.cpp user expects or is refused with a message naming tandem's spelling.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "process_support.h"
#include "test_support.h"

namespace tandem {
namespace {

using testing::RunResult;
using testing::RunTandem;
using testing::SharedDir;

std::string Model(const char* name) { return (SharedDir() / "reference/models" / name).string(); }

// -f FILE reads the prompt from a file: the same text as -p gives.
TEST(FlagsCliTest, PromptFromAFile) {
  const std::string m = Model("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(m);
  const std::string file = ::testing::TempDir() + "tandem_prompt." + std::to_string(getpid());
  std::ofstream(file) << "Once upon a time, there was a dog";
  RunResult a = RunTandem({"run", "-m", m, "-f", file, "-n", "24", "--temp", "0"});
  RunResult b = RunTandem({"run", "-m", m, "-p", "Once upon a time, there was a dog", "-n", "24", "--temp", "0"});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  auto prompt_tokens = [](const std::string& err) { return err.substr(0, err.find(" tokens")); };
  EXPECT_EQ(prompt_tokens(a.err), prompt_tokens(b.err)) << a.err << b.err;
  RunResult missing = RunTandem({"run", "-m", m, "-f", file + ".none", "-n", "4"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("cannot open"), std::string::npos) << missing.err;
  std::remove(file.c_str());
}

// --ignore-eos: on the tiny random model most seeded runs end at EOS well before 300 tokens;
// those that do run to -n with the flag. (The text differs before that point too: with EOS banned
// at every step, each draw is from a renormalised distribution.) Which seeds end at EOS depends on
// the kernels' last bits, so the test takes the first three of a dozen that do.
TEST(FlagsCliTest, IgnoreEosRunsToTheTokenLimit) {
  const std::string m = Model("tiny-q8_0.gguf");
  TANDEM_REQUIRE_SHARED(m);
  int checked = 0;
  for (int seed = 1; seed <= 12 && checked < 3; ++seed) {
    SCOPED_TRACE(seed);
    const std::vector<std::string> args = {"run", "-m", m, "-p", "Hello", "-n", "300", "--temp", "1.5", "--top-k", "0",
                                           "--top-p", "1", "--min-p", "0", "-s", std::to_string(seed)};
    RunResult plain = RunTandem(args);
    ASSERT_EQ(plain.code, 0) << plain.err;
    if (plain.err.find("(eos)") == std::string::npos) continue;
    ++checked;
    std::vector<std::string> ignore = args;
    ignore.push_back("--ignore-eos");
    RunResult ignored = RunTandem(ignore);
    ASSERT_EQ(ignored.code, 0) << ignored.err;
    EXPECT_NE(ignored.err.find("generation: 300 tokens"), std::string::npos) << ignored.err;
    EXPECT_NE(ignored.err.find("(length)"), std::string::npos) << ignored.err;
  }
  EXPECT_EQ(checked, 3) << "fewer than 3 of 12 seeded runs ended at EOS";
}

// serve's sampling flags are its requests' defaults, checked before the model loads.
TEST(FlagsCliTest, ServeRefusesABadDefaultSampling) {
  const std::string m = Model("tiny-q8_0.gguf");
  TANDEM_REQUIRE_SHARED(m);
  testing::Process serve({"serve", "-m", m, "--port", "0", "--top-p", "5"});
  ASSERT_TRUE(serve.Wait(30)) << "serve started with top_p = 5: " << serve.err();
  EXPECT_EQ(serve.exit_code(), 1);
  EXPECT_NE(serve.err().find("top_p"), std::string::npos) << serve.err();
}

// -s -1 asks for a random seed (llama.cpp's default): two runs differ; a fixed seed repeats.
TEST(FlagsCliTest, SeedMinusOneIsRandom) {
  const std::string m = Model("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(m);
  const std::vector<std::string> args = {"run", "-m", m, "-p", "Once upon a time", "-n", "48", "--temp", "1.0", "-s", "-1"};
  RunResult a = RunTandem(args), b = RunTandem(args);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_NE(a.out, b.out) << "two runs with -s -1 gave the same 48 tokens";
  RunResult bad = RunTandem({"run", "-m", m, "-p", "x", "-n", "1", "-s", "-2"});
  EXPECT_NE(bad.code, 0);
}

// -ub and --ubatch-size set the micro-batch on one node; -b caps it; any split into multiples of
// 8 gives the same logits to the bit; a bad value is refused naming the flag.
TEST(FlagsCliTest, MicroBatchFlags) {
  const std::string m = Model("tiny-q4_k_m.gguf");
  TANDEM_REQUIRE_SHARED(m);
  const std::string prompt =
      "Once upon a time there was a little girl who lived in a village near the forest. Whenever "
      "she went out, the little girl wore a red riding cloak";
  auto logits = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"logits", "-m", m, "-p", prompt, "--greedy", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    RunResult r = RunTandem(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? nlohmann::json::parse(r.out)["logits"] : nlohmann::json();
  };
  const nlohmann::json whole = logits({});
  ASSERT_GT(whole.size(), 24u);
  EXPECT_EQ(logits({"-ub", "8"}), whole);
  EXPECT_EQ(logits({"--ubatch-size", "16"}), whole);
  EXPECT_EQ(logits({"-b", "24"}), whole);
  EXPECT_EQ(logits({"-ub", "512", "-b", "8"}), whole);
  RunResult bad = RunTandem({"logits", "-m", m, "-p", "x", "-ub", "0"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--ubatch-size"), std::string::npos) << bad.err;
}

// -ts is --tensor-split; --dry-run prints the plan (one node here) without loading.
TEST(FlagsCliTest, DryRunPrintsThePlanAndTsIsAccepted) {
  const std::string m = Model("tiny-q4_k_m.gguf");
  TANDEM_REQUIRE_SHARED(m);
  RunResult r = RunTandem({"run", "-m", m, "-p", "Hello", "--dry-run", "-ts", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("placement"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("main (this machine)"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("prompt:"), std::string::npos) << "nothing should have run: " << r.err;
  RunResult bad = RunTandem({"run", "-m", m, "-p", "Hello", "--dry-run", "-ts", "x"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--tensor-split"), std::string::npos) << bad.err;
}

// `chat --stop`: the reply ends where the stop string starts, and the string is not printed.
TEST(FlagsCliTest, ChatStopString) {
  const std::string m = Model("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(m);
  // The same turn without and with a stop string taken from the middle of the first reply.
  auto chat = [&](std::vector<std::string> extra) {
    const std::string in = ::testing::TempDir() + "tandem_chat_in." + std::to_string(getpid());
    std::ofstream(in) << "Tell me a story\n/exit\n";
    std::vector<std::string> args = {"chat", "-m", m, "-n", "40", "--temp", "0", "--chat-template", "chatml"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::string cmd = std::string(TANDEM_BIN);
    for (const std::string& a : args) cmd += " '" + a + "'";
    cmd += " < " + in + " 2>/dev/null";
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      pclose(p);
    }
    std::remove(in.c_str());
    return out;
  };
  const std::string full = chat({});
  const size_t start = full.find("> ") + 2;
  ASSERT_NE(start, std::string::npos + 2) << full;
  const std::string reply = full.substr(start, full.find("\n", start) - start);
  ASSERT_GT(reply.size(), 12u) << full;
  const std::string stop = reply.substr(reply.size() / 2, 4);
  const std::string cut = chat({"--stop", stop});
  EXPECT_NE(cut.find(reply.substr(0, reply.find(stop))), std::string::npos) << cut;
  EXPECT_EQ(cut.find(reply), std::string::npos) << "the reply went past the stop string: " << cut;
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// --list-devices (llama.cpp's): the CPU and every Vulkan device (lavapipe in CI), no model needed.
TEST(FlagsCliTest, ListDevices) {
  RunResult r = RunTandem({"--list-devices"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("CPU"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Vulkan0: "), std::string::npos) << r.out << " (scripts/install-deps.sh installs lavapipe)";
}

// --device Vulkan0 -ngl 99 (llama.cpp's spellings): every layer and the head on the GPU give
// llama2.c's exact greedy text of stories260K; the default (a software driver only) runs on the
// CPU and says so in one line; a device that does not exist is an error naming it.
TEST(FlagsCliTest, DeviceAndGpuLayers) {
  const std::string m = Model("stories260K.gguf");
  TANDEM_REQUIRE_SHARED(m);
  RunResult gpu = RunTandem({"run", "-m", m, "-n", "200", "--temp", "0", "-dev", "Vulkan0", "-ngl", "99"});
  ASSERT_EQ(gpu.code, 0) << gpu.err;
  EXPECT_EQ(gpu.out, testing::Slurp((SharedDir() / "reference/stories260K.llama2c-greedy-200.txt").string()));
  EXPECT_NE(gpu.err.find("5 of 5 layers and the head on Vulkan0"), std::string::npos) << gpu.err;
  // Without --device: the first GPU that is not a software driver, else the CPU, said in one line.
  RunResult list = RunTandem({"--list-devices"});
  bool hardware = false;
  for (size_t at = list.out.find("  Vulkan"); at != std::string::npos; at = list.out.find("  Vulkan", at + 1)) {
    const std::string line = list.out.substr(at, list.out.find('\n', at) - at);
    hardware |= line.find("software driver") == std::string::npos && line.find("unusable") == std::string::npos;
  }
  RunResult auto_device = RunTandem({"run", "-m", m, "-n", "4", "--temp", "0"});
  ASSERT_EQ(auto_device.code, 0) << auto_device.err;
  EXPECT_NE(auto_device.err.find(hardware ? "layers and the head on Vulkan" : "running on the CPU"), std::string::npos)
      << auto_device.err;
  RunResult none = RunTandem({"run", "-m", m, "-n", "4", "--device", "Vulkan7"});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("no device Vulkan7"), std::string::npos) << none.err;
  RunResult unknown = RunTandem({"run", "-m", m, "-n", "4", "--device", "Metal"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.err.find("unknown device 'Metal'"), std::string::npos) << unknown.err;
}

}  // namespace
}  // namespace tandem
