// Speculative decoding from the command line, real processes: `run` with --lookup and with a draft
// model (-md) writes the plain greedy text on one node and over one and two workers; `bench` reports the
// acceptance; a draft model of another vocabulary is refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "process_support.h"
#include "test_support.h"

namespace tandem::testing {
namespace {

std::string ModelPath(const char* name) { return (SharedDir() / "reference/models" / name).string(); }

TEST(SpeculativeCliTest, RunWithEachDrafterWritesThePlainGreedyTextOverZeroOneAndTwoWorkers) {
  const std::string model = ModelPath("tiny-q4_k_m.gguf");
  TANDEM_REQUIRE_SHARED(model);
  const std::vector<std::string> base = {"run", "-m", model, "-p", "one two three, one two three", "-n", "64",
                                         "--temp", "0", "--ignore-eos", "-t", "1"};
  RunResult plain = RunTandem(base);
  ASSERT_EQ(plain.code, 0) << plain.err;
  // The draft model's rounds have a fixed length (--draft-min = --draft-max): the adaptive length
  // stops speculating where drafting measures slow (a sanitized or busy build), and then the text
  // would be the plain one without a single round verified. Prompt lookup drafts at no cost and
  // keeps the adaptive length.
  for (const std::vector<std::string>& spec :
       {std::vector<std::string>{"--lookup"},
        std::vector<std::string>{"-md", model, "--draft-min", "6", "--draft-max", "6"}}) {
    for (int n_workers : {0, 1, 2}) {
      SCOPED_TRACE(spec[0] + " over " + std::to_string(n_workers) + " workers");
      std::vector<std::string> args = base;
      args.insert(args.end(), spec.begin(), spec.end());
      // Fresh workers for each run: one that served the last run may still be freeing its session.
      std::vector<std::unique_ptr<Process>> workers;
      if (n_workers > 0) {
        args.insert(args.end(), {"--plan", "memory"});
        for (int i = 0; i < n_workers; ++i) {
          int port = 0;
          workers.push_back(StartWorker({}, &port));
          ASSERT_NE(port, 0) << workers.back()->err();
          args.insert(args.end(), {"--worker", "127.0.0.1:" + std::to_string(port)});
        }
      }
      RunResult r = RunTandem(args);
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_EQ(r.out, plain.out);
      EXPECT_NE(r.err.find("speculation ("), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("tokens per round"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("; a round: drafting "), std::string::npos) << r.err;
    }
  }
}

TEST(SpeculativeCliTest, BenchReportsAcceptanceAndTokensPerRound) {
  const std::string model = ModelPath("tiny-q8_0.gguf");
  TANDEM_REQUIRE_SHARED(model);
  // A fixed length (--draft-min = --draft-max), so that the rounds do not depend on how fast this
  // machine happens to be (the adaptive length may stop speculating when a busy machine makes the
  // measured verification cost look high, and then no guess may be accepted in 48 tokens).
  RunResult r = RunTandem({"bench", "-m", model, "-p", "0", "-n", "48", "-r", "1", "-t", "1", "--lookup", "--draft-min", "4",
                           "--draft-max", "4", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  const nlohmann::json& s = j[0]["speculation"];
  EXPECT_EQ(s["drafter"], "prompt lookup");
  // The random model's greedy text repeats, so lookup finds guesses and some are accepted.
  ASSERT_GT(s["rounds"].get<int64_t>(), 0);
  EXPECT_GT(s["accepted"].get<int64_t>(), 0);
  EXPECT_LE(s["accepted"].get<int64_t>(), s["guesses"].get<int64_t>());
  EXPECT_GE(s["guesses"].get<int64_t>(), s["rounds"].get<int64_t>());
  EXPECT_NEAR(s["tokens_per_round"].get<double>(),
              static_cast<double>(s["accepted"].get<int64_t>() + s["rounds"].get<int64_t>()) / s["rounds"].get<int64_t>(),
              1e-9);
  EXPECT_NEAR(s["acceptance_rate"].get<double>(),
              static_cast<double>(s["accepted"].get<int64_t>()) / s["guesses"].get<int64_t>(), 1e-9);
  EXPECT_GE(s["draft_ms"].get<double>(), 0);
  EXPECT_GT(s["forward_ms"].get<double>(), 0);
  RunResult text = RunTandem({"bench", "-m", model, "-p", "0", "-n", "48", "-r", "1", "-t", "1", "-md", model});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("tg48: speculation (draft model"), std::string::npos) << text.out;
}

TEST(SpeculativeCliTest, ADraftModelOfAnotherVocabularyIsRefused) {
  const std::string model = ModelPath("tiny-q4_k_m.gguf");
  const std::string other = ModelPath("aidreams260K.gguf");
  TANDEM_REQUIRE_SHARED(model);
  TANDEM_REQUIRE_SHARED(other);
  RunResult r = RunTandem({"run", "-m", model, "-md", other, "-p", "hi", "-n", "4"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("draft model " + other), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("vocabulary"), std::string::npos) << r.err;
  RunResult both = RunTandem({"run", "-m", model, "-md", model, "--lookup", "-p", "hi", "-n", "4"});
  EXPECT_EQ(both.code, 1);
  EXPECT_NE(both.err.find("choose one"), std::string::npos) << both.err;
  RunResult range = RunTandem({"run", "-m", model, "--lookup", "--draft-min", "9", "--draft-max", "4", "-p", "hi", "-n", "4"});
  EXPECT_NE(range.code, 0);
}

}  // namespace
}  // namespace tandem::testing
