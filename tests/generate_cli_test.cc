// `tandem run`, `logits` and `bench` end to end on the reference models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "test_support.h"

namespace tandem {
namespace {

using testing::RunResult;
using testing::RunTandem;
using testing::SharedDir;

TEST(GenerateCliTest, Stories260KGreedyMatchesLlama2cByteForByte) {
  const auto model = SharedDir() / "reference/models/stories260K.gguf";
  TANDEM_REQUIRE_SHARED(model);
  RunResult r = RunTandem({"run", "-m", model.string(), "-n", "200", "--temp", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, testing::Slurp((SharedDir() / "reference/stories260K.llama2c-greedy-200.txt").string()));
  EXPECT_NE(r.err.find("generation: 200 tokens"), std::string::npos) << r.err;
}

// With stdout and stderr in one pipe (`tandem run ... 2>&1 | less`), the speeds come after the
// whole text, on a line of their own.
TEST(GenerateCliTest, SpeedsFollowTheTextWhenBothShareAPipe) {
  const auto model = SharedDir() / "reference/models/stories260K.gguf";
  TANDEM_REQUIRE_SHARED(model);
  const std::string cmd =
      std::string(TANDEM_BIN) + " run -m '" + model.string() + "' -p 'Once upon a time' -n 12 --temp 0 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string all;
  char buf[4096];
  for (size_t got; (got = std::fread(buf, 1, sizeof buf, pipe)) > 0;) all.append(buf, got);
  ASSERT_EQ(pclose(pipe), 0) << all;
  const size_t speeds = all.find("prompt: 5 tokens");
  ASSERT_NE(speeds, std::string::npos) << all;
  EXPECT_EQ(all[speeds - 1], '\n') << all;
  EXPECT_NE(all.rfind(", there was", speeds), std::string::npos) << all;  // the text came first
}

TEST(GenerateCliTest, SeededSamplingIsReproducible) {
  const auto model = SharedDir() / "reference/models/stories260K.gguf";
  TANDEM_REQUIRE_SHARED(model);
  const std::vector<std::string> args = {"run", "-m", model.string(), "-p", "Once upon a time",
                                         "-n", "60", "--temp", "0.9", "-s", "1234"};
  RunResult a = RunTandem(args), b = RunTandem(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  std::vector<std::string> other = args;
  other.back() = "99";
  EXPECT_NE(RunTandem(other).out, a.out);
}

TEST(GenerateCliTest, LogitsJsonHasTheReferenceFields) {
  const auto model = SharedDir() / "reference/models/tiny-q8_0.gguf";
  TANDEM_REQUIRE_SHARED(model);
  RunResult r = RunTandem({"logits", "-m", model.string(), "-p", "Once upon a time", "--greedy", "4"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* f : {"model", "prompt", "add_bos", "flash_attn", "n_vocab", "prompt_tokens",
                        "logits", "greedy"}) {
    EXPECT_TRUE(j.contains(f)) << f;
  }
  EXPECT_EQ(j["prompt_tokens"], nlohmann::json({1, 403, 407, 261, 378}));
  EXPECT_EQ(j["logits"].size(), 5u);
  EXPECT_EQ(j["logits"][0].size(), 512u);
  EXPECT_EQ(j["greedy"].size(), 4u);
}

// -fa and -ctk/-ctv reach the model: the JSON says which attention ran, flash attention gives the
// same distribution as the standard path on a float model, a Q8_0 cache still generates, and a
// cache type the engine does not have is refused with a message naming the flag.
TEST(GenerateCliTest, FlashAttentionAndCacheTypeFlags) {
  const auto model = SharedDir() / "reference/models/stories260K.gguf";
  TANDEM_REQUIRE_SHARED(model);
  const std::vector<std::string> base = {"logits", "-m", model.string(), "-p", "Once upon a time, there was"};
  RunResult std_run = RunTandem(base);
  std::vector<std::string> fa_args = base;
  fa_args.push_back("-fa");
  RunResult fa_run = RunTandem(fa_args);
  ASSERT_EQ(std_run.code, 0) << std_run.err;
  ASSERT_EQ(fa_run.code, 0) << fa_run.err;
  const nlohmann::json a = nlohmann::json::parse(std_run.out), b = nlohmann::json::parse(fa_run.out);
  EXPECT_EQ(a["flash_attn"], false);
  EXPECT_EQ(b["flash_attn"], true);
  ASSERT_EQ(a["logits"].size(), b["logits"].size());
  for (size_t t = 0; t < a["logits"].size(); ++t) {
    const std::vector<float> x = a["logits"][t], y = b["logits"][t];
    ASSERT_EQ(x.size(), y.size());
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double{x[i]} - y[i]));
    EXPECT_LT(worst, 1e-2) << "position " << t;
  }
  const auto tiny = SharedDir() / "reference/models/tiny-q4_k_m.gguf";  // head size 32 or more
  RunResult q8 = RunTandem({"run", "-m", tiny.string(), "-p", "Once upon a time", "-n", "24",
                            "--temp", "0", "-fa", "-ctk", "q8_0", "-ctv", "q8_0"});
  ASSERT_EQ(q8.code, 0) << q8.err;
  EXPECT_FALSE(q8.out.empty());
  // stories260K's heads are 8 wide: too narrow for Q8_0 blocks, which is said, not crashed on.
  RunResult narrow = RunTandem({"run", "-m", model.string(), "-p", "x", "-ctk", "q8_0"});
  EXPECT_NE(narrow.code, 0);
  EXPECT_NE(narrow.err.find("multiple of 32"), std::string::npos) << narrow.err;
  RunResult bad = RunTandem({"run", "-m", model.string(), "-p", "x", "-ctk", "q4_0"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("cache-type-k"), std::string::npos) << bad.err;
}

// --mmap computes from the file map and the default (--no-mmap) from a copy of the weights: the same
// bytes, so the same logits to the last bit.
// --no-mmap (the default) copies the weights into memory; Q4_0, Q5_0, Q8_0, Q4_K and Q6_K matrices
// go into the interleaved layout there (kernels/interleave.h), whose products round differently.
// Without such matrices (BF16; every quantized reference file has a Q6_K head) the logits are the
// same to the bit; with them (Q4_K_M, Q5_K_M) within what moved roundings of the activations give
// (the reference README: max KL about 1e-2 between two orders of summation).
TEST(GenerateCliTest, MmapAndCopiedWeightsGiveTheSameLogits) {
  for (const char* name : {"tiny-bf16.gguf", "tiny-q5_k_m.gguf", "tiny-q4_k_m.gguf"}) {
    SCOPED_TRACE(name);
    const auto model = SharedDir() / "reference/models" / name;
    TANDEM_REQUIRE_SHARED(model);
    const std::vector<std::string> base = {"logits", "-m", model.string(), "-p", "Once upon a time", "--greedy", "8"};
    std::vector<std::string> mapped = base, copied = base;
    mapped.push_back("--mmap");
    copied.push_back("--no-mmap");
    RunResult a = RunTandem(base), b = RunTandem(mapped), c = RunTandem(copied);
    ASSERT_EQ(a.code, 0) << a.err;
    ASSERT_EQ(b.code, 0) << b.err;
    ASSERT_EQ(c.code, 0) << c.err;
    EXPECT_EQ(a.out, c.out);
    const nlohmann::json la = nlohmann::json::parse(a.out), lb = nlohmann::json::parse(b.out);
    if (std::string(name) == "tiny-bf16.gguf") {
      EXPECT_EQ(la["logits"], lb["logits"]);
      continue;
    }
    std::vector<float> x, y;
    for (const auto& row : la["logits"]) for (float v : row) x.push_back(v);
    for (const auto& row : lb["logits"]) for (float v : row) y.push_back(v);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_LE(testing::MaxKl(x, y, la["n_vocab"].get<int64_t>()), 1e-2);
  }
}

// `tandem logits --device Vulkan0 -ngl 99` (every layer and the head on the GPU: lavapipe in CI)
// against the reference logits: a float llama, a quantized gemma3 (sliding window) and a
// quantized mixture of experts, within the README's bounds (max KL: 1e-3 for float weights; 0.3
// for the quantized gemma3 and MoE files). Every file is checked through the library in
// ModelReferenceTest.Gpu*; this is the command a user runs.
TEST(GenerateCliTest, LogitsOnTheGpuMatchTheReference) {
  for (const char* ref : {"stories260K.B.fa0.json", "tiny-gemma3-q4_k_m.B.fa0.json", "tiny-qwen3moe-q4_k_m.A.fa0.json"}) {
    SCOPED_TRACE(ref);
    const auto path = SharedDir() / "reference/logits" / ref;
    TANDEM_REQUIRE_SHARED(path);
    const nlohmann::json want = nlohmann::json::parse(testing::Slurp(path.string()));
    const std::string model = (SharedDir() / "reference/models" / want["model"].get<std::string>()).string();
    RunResult r = RunTandem({"logits", "-m", model, "-p", want["prompt"].get<std::string>(), "--device", "Vulkan0",
                             "-ngl", "99"});
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json got = nlohmann::json::parse(r.out);
    ASSERT_EQ(got["prompt_tokens"], want["prompt_tokens"]);
    std::vector<float> a, b;
    for (const auto& row : want["logits"]) for (float v : row) a.push_back(v);
    for (const auto& row : got["logits"]) for (float v : row) b.push_back(v);
    const double kl = testing::MaxKl(a, b, want["n_vocab"].get<int64_t>());
    std::printf("%s on the GPU: max KL %.2e\n", ref, kl);
    std::fflush(stdout);
    EXPECT_LE(kl, std::string(ref).find("260K") != std::string::npos ? 1e-3 : 0.3);
  }
}

TEST(GenerateCliTest, BenchJsonAndErrors) {
  const auto model = SharedDir() / "reference/models/tiny-q4_k_m.gguf";
  TANDEM_REQUIRE_SHARED(model);
  RunResult r = RunTandem({"bench", "-m", model.string(), "-p", "32", "-n", "8", "-r", "1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["test"], "pp32");
  EXPECT_EQ(j[1]["test"], "tg8");
  EXPECT_GT(j[1]["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j[1]["weight_bytes_read_per_token"].get<uint64_t>(), 0u);
  EXPECT_EQ(j[1]["backend"], "CPU");
  EXPECT_EQ(j[1]["gpu_layers"], 0);
  // On the GPU (lavapipe in CI): the device and its layers are reported, and the roofline is the
  // GPU's read bandwidth (tandem's read shader).
  RunResult gpu = RunTandem({"bench", "-m", model.string(), "-p", "8", "-n", "4", "-r", "1", "--json", "--roofline",
                             "-dev", "Vulkan0", "-ngl", "99"});
  ASSERT_EQ(gpu.code, 0) << gpu.err;
  nlohmann::json g = nlohmann::json::parse(gpu.out);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[1]["backend"], "Vulkan");
  EXPECT_EQ(g[1]["gpu_layers"], 4);
  EXPECT_NE(g[1]["device"].get<std::string>().find("Vulkan0 ("), std::string::npos) << g[1]["device"];
  EXPECT_GT(g[1]["read_bandwidth_gbps"].get<double>(), 0.0);
  EXPECT_GT(g[1]["tokens_per_s"].get<double>(), 0.0);
  // --profile: where a decode step's GPU time goes, by shader (Vulkan timestamps).
  RunResult prof = RunTandem({"bench", "-m", model.string(), "-p", "0", "-n", "4", "-r", "1", "--json", "--profile",
                              "-dev", "Vulkan0", "-ngl", "99"});
  ASSERT_EQ(prof.code, 0) << prof.err;
  nlohmann::json pj = nlohmann::json::parse(prof.out);
  ASSERT_EQ(pj.size(), 2u);
  EXPECT_EQ(pj[1]["test"], "profile");
  EXPECT_EQ(pj[1]["steps"], 36);  // 4 warm-up steps and 32 timed ones
  EXPECT_GT(pj[1]["gpu_ms"].get<double>(), 0.0);
  EXPECT_GT(pj[1]["token_ms"].get<double>(), 0.0);
  std::map<std::string, double> calls;
  for (const auto& e : pj[1]["shaders"]) calls[e["name"].get<std::string>()] = e["calls_per_token"].get<double>();
  EXPECT_GT(calls["mul_q4_k"], 0.0) << pj[1].dump();  // the Q4_K matrices of every layer
  EXPECT_EQ(calls["attn_f16_f16"], 4.0) << pj[1].dump();  // one attention per layer and step
  RunResult cpu_prof = RunTandem({"bench", "-m", model.string(), "-p", "0", "-n", "4", "-r", "1", "--profile"});
  EXPECT_NE(cpu_prof.code, 0);
  EXPECT_NE(cpu_prof.err.find("--profile"), std::string::npos) << cpu_prof.err;
  RunResult missing = RunTandem({"run", "-m", "/nonexistent.gguf", "-p", "x"});
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.err.find("tandem: error:"), std::string::npos);
  RunResult full = RunTandem({"run", "-m", model.string(), "-c", "4", "-p", "Once upon a time, there was"});
  EXPECT_NE(full.code, 0);
  EXPECT_NE(full.err.find("context"), std::string::npos) << full.err;
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// A model tandem makes itself runs end to end: synthetic vocabulary, tokenize, generate.
TEST(GenerateCliTest, SelfMadeModelGenerates) {
  const std::string path = ::testing::TempDir() + "tandem_selfmade_q8_0.gguf";
  testing::RunResult mk =
      testing::RunTandem({"make-model", "--shape", "tiny", "--type", "q8_0", "-o", path});
  ASSERT_EQ(mk.code, 0) << mk.err;
  testing::RunResult tok = testing::RunTandem({"tokenize", "-m", path, "-p", "hello", "--ids"});
  ASSERT_EQ(tok.code, 0) << tok.err;
  EXPECT_FALSE(tok.out.empty());
  testing::RunResult run = testing::RunTandem(
      {"run", "-m", path, "-p", "hello world", "-n", "16", "--temp", "0"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_GT(run.out.size(), 1u);
  EXPECT_NE(run.err.find("generation: 16 tokens"), std::string::npos) << run.err;
  std::remove(path.c_str());
}

// make-model --n-layer and --context-length: a shallow copy of a big shape whose context is longer
// than the shape's own, and the engine's context grows with it (a server's slots share it).
TEST(GenerateCliTest, SelfMadeModelTakesItsLayerCountAndContextLength) {
  const std::string path = ::testing::TempDir() + "tandem_selfmade_ctx.gguf";
  testing::RunResult mk = testing::RunTandem({"make-model", "--shape", "tiny", "--type", "q8_0", "--n-layer",
                                              "1", "--context-length", "8192", "-o", path});
  ASSERT_EQ(mk.code, 0) << mk.err;
  testing::RunResult info = testing::RunTandem({"inspect", "--json", path});
  ASSERT_EQ(info.code, 0) << info.err;
  const nlohmann::json j = nlohmann::json::parse(info.out);
  EXPECT_EQ(j["summary"]["n_layer"], 1);
  EXPECT_EQ(j["summary"]["n_ctx"], 8192);
  // 2500 tokens fit in its context (the tiny shape's own is 512).
  testing::RunResult run = testing::RunTandem(
      {"run", "-m", path, "-p", "hello", "-n", "2500", "-c", "4096", "--temp", "0", "--ignore-eos"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.err.find("generation: 2500 tokens"), std::string::npos) << run.err;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tandem
