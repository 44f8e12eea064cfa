// Speculative decoding: the drafters, the tuner, greedy identity on every shared reference model
// (one node and split over workers), the KV cache after a partly accepted round, refused draft
// vocabularies, and the distribution of sampled verification on a real tiny model.
#include "engine/speculative.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "engine/engine.h"
#include "pipeline/executor_factory.h"
#include "pipeline/test_worker.h"

namespace tandem::engine {
namespace {

namespace fs = std::filesystem;

fs::path Models() { return fs::path(TANDEM_SHARED_DIR) / "reference/models"; }

std::vector<int32_t> Guess(Drafter& d, const std::vector<int32_t>& tokens, int n) {
  std::vector<int32_t> out;
  double s = -1;
  EXPECT_TRUE(d.Draft(0, tokens, n, &out, &s).ok());
  EXPECT_EQ(s, 0);
  return out;
}

TEST(LookupDrafterTest, GuessesWhatFollowedTheLatestMatch) {
  LookupDrafter d(4, 1);
  // "7 8 9" occurred twice; the latest occurrence was followed by 5 6.
  EXPECT_EQ(Guess(d, {7, 8, 9, 1, 2, 7, 8, 9, 5, 6, 3, 7, 8, 9}, 2), (std::vector<int32_t>{5, 6}));
  // The longest matching suffix wins over a later shorter one: "1 2" was followed by 3.
  EXPECT_EQ(Guess(d, {1, 2, 3, 4, 2, 9, 1, 2}, 1), (std::vector<int32_t>{3}));
  // A loop is guessed on past the end of the text.
  EXPECT_EQ(Guess(d, {4, 1, 2, 1, 2}, 5), (std::vector<int32_t>{1, 2, 1, 2, 1}));
  EXPECT_TRUE(Guess(d, {1, 2, 3, 4}, 4).empty());  // nothing repeats
  EXPECT_TRUE(Guess(d, {5}, 4).empty());
  EXPECT_TRUE(Guess(d, {1, 1}, 0).empty());
}

// --draft-min equal to --draft-max fixes the length: every round takes that many guesses (the
// caller's limit permitting), even when every guess fails and a row costs a whole step.
TEST(SpeculationTunerTest, EqualMinAndMaxFixTheLength) {
  SpeculationTuner t(4, 4);
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(t.Choose(16, i % 2 == 0), 4) << i;
    t.Record(4, 0, 0.020 * 5, 4, 0.020 * 4);
  }
  EXPECT_EQ(t.Choose(3, false), 0);  // fewer than the fixed length left: a plain step
  SpeculationTuner adaptive(1, 1);    // min 1 = max 1 is fixed too; min 0, max 1 is not
  EXPECT_EQ(adaptive.Choose(8, false), 1);
  SpeculationTuner zero(0, 1);
  EXPECT_EQ(zero.Choose(8, false), 0);  // the first round measures a plain step
}

TEST(SpeculationTunerTest, SpeculatesWhenGuessesPayAndStopsWhenTheyFail) {
  SpeculationTuner t(0, 16);
  EXPECT_EQ(t.Choose(16, false), 0);  // the first round measures a plain step
  t.Record(0, 0, 0.040, 0, 0);
  // Every guess accepted, each verified row adding 2 ms to a 40 ms step (links): long rounds.
  for (int i = 0; i < 20; ++i) {
    const int k = t.Choose(16, false);
    ASSERT_GT(k, 0);
    t.Record(k, k, 0.040 + 0.002 * k, 0, 0);
  }
  EXPECT_EQ(t.Choose(16, false), 16);
  EXPECT_EQ(t.Choose(5, false), 5);  // capped by the caller's limit
  // Now every guess fails and a row costs as much as a step (one node): plain steps, with a
  // probe now and then, less often while probes fail.
  SpeculationTuner u(0, 16);
  u.Record(0, 0, 0.020, 0, 0);
  for (int i = 0; i < 30; ++i) {
    const int k = u.Choose(16, false);
    u.Record(k, 0, 0.020 + 0.020 * k, 0, 0);
  }
  int probes = 0;
  for (int i = 0; i < 256; ++i) {
    const int k = u.Choose(16, false);
    probes += k > 0 ? 1 : 0;
    u.Record(k, 0, 0.020 + 0.020 * k, 0, 0);
  }
  EXPECT_GE(probes, 2);
  EXPECT_LE(probes, 6);
  // A drafter that costs compute takes two guesses until its cost is known, and a draft as slow
  // as the step it saves is not worth it even when every guess is accepted.
  SpeculationTuner c(0, 16);
  c.Record(0, 0, 0.020, 0, 0);
  EXPECT_EQ(c.Choose(16, true), 2);
  EXPECT_EQ(c.Choose(1, true), 1);  // the caller's limit first
  for (int i = 0; i < 40; ++i) {
    const int k = c.Choose(16, true);
    c.Record(k, k, 0.020 + 0.020 * k, k, 0.030 * k);
  }
  EXPECT_EQ(c.Choose(16, true), 0);
  // --draft-min: fewer guesses are not worth a round.
  SpeculationTuner m(4, 16);
  m.Record(0, 0, 0.040, 0, 0);
  EXPECT_TRUE(m.Choose(3, false) == 0);
}

// A cheap draft model whose guesses all fail, costs as measured on one node (a 2-layer draft of a
// 22-layer model: a step 11.4 ms, a verified row 0.6 ms, a guess 2 ms): speculation stops after
// the first few rounds (an acceptance that decays by a tenth per failed guess took 6).
TEST(SpeculationTunerTest, FailingGuessesStopSpeculationWithinThreeRounds) {
  SpeculationTuner t(0, 16);
  t.Record(0, 0, 0.0114, 0, 0);
  int rounds = 0;
  for (int i = 0; i < 10; ++i) {  // before the first probe (8 plain steps after the last round)
    const int k = t.Choose(16, true);
    rounds += k > 0 ? 1 : 0;
    t.Record(k, 0, 0.0114 + 0.0006 * k, k, 0.002 * k);
  }
  EXPECT_GE(rounds, 1);
  EXPECT_LE(rounds, 3);
  EXPECT_LT(t.acceptance(), 0.25);
}

// A draft model as large as the model, its guesses failing, on one node (a step 22 ms, a guess
// 22 ms, each round's catch-up 40 ms): its probes cost two or three steps each, so they come
// no more often than kProbeBudget of the plain steps pays for (the doubling schedule alone
// speculated 6 rounds in 256 steps, 5 % of the time).
TEST(SpeculationTunerTest, ProbesOfACostlyFailingDraftStayWithinTheirBudget) {
  SpeculationTuner t(0, 16);
  t.Record(0, 0, 0.022, 0, 0);
  int rounds = 0;
  double extra = 0;
  for (int i = 0; i < 256; ++i) {
    const int k = t.Choose(16, true);
    if (k == 0) {
      t.Record(0, 0, 0.022, 0, 0);
      continue;
    }
    ++rounds;
    const double seconds = 0.022 + 0.003 * k, wall = 0.040 + 0.022 * k;
    extra += wall + seconds - 0.022;
    t.Record(k, 0, seconds, k, 0.022 * k, wall);
  }
  EXPECT_GE(rounds, 1);
  EXPECT_LE(rounds, 3);
  EXPECT_LE(extra, 0.05 * 256 * 0.022);
}

// A draft predicted (from its size) to cost a plain step per guess cannot pay even with every
// guess accepted, so on one node no round is taken to measure it; behind links, where a plain
// step waits for them too, the same draft is measured, as a small one is anywhere.
TEST(SpeculationTunerTest, ADraftPredictedToCostAStepIsNotMeasuredWhereNoRoundCanPay) {
  SpeculationTuner t(0, 16);
  t.Record(0, 0, 0.022, 0, 0);
  t.PredictDraft(0.022);
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(t.Choose(16, true), 0) << i;
    t.Record(0, 0, 0.022, 0, 0);
  }
  SpeculationTuner links(0, 16);
  links.Record(0, 0, 0.038, 0, 0);  // 22 ms of compute, 15 ms of links
  links.PredictDraft(0.022);
  EXPECT_EQ(links.Choose(16, true), 2);
  SpeculationTuner small(0, 16);
  small.Record(0, 0, 0.022, 0, 0);
  small.PredictDraft(0.002);
  EXPECT_EQ(small.Choose(16, true), 2);
  SpeculationTuner fixed(4, 4);  // the user's fixed length stands
  fixed.Record(0, 0, 0.022, 0, 0);
  fixed.PredictDraft(0.022);
  EXPECT_EQ(fixed.Choose(16, true), 4);
}

// The model as its own draft behind links: every guess accepted, a step 30 ms, a verified row
// 0.5 ms, a guess 12 ms. A round of one guess is never timed (the draft's catch-up batch makes
// it: ModelDrafter reports no time), so the measuring rounds take two guesses, and the rounds
// grow once the cost is known.
TEST(SpeculationTunerTest, ACostlyDrafterWhoseSingleGuessesAreUntimedStillGetsMeasured) {
  SpeculationTuner t(0, 16);
  t.Record(0, 0, 0.030, 0, 0);
  int k = 0;
  for (int i = 0; i < 20; ++i) {
    k = t.Choose(16, true);
    ASSERT_GT(k, 0) << i;
    const int timed = k > 1 ? k : 0;
    t.Record(k, k, 0.030 + 0.0005 * k, timed, 0.012 * timed);
  }
  EXPECT_GT(k, 4);
}

// A forward's time does not grow by the same amount per row: the kernels take up to 16 rows per
// call, so 17 rows pay a second pass (measured behind 5 ms links: 16 guesses 101-107 ms, 15 guesses
// 83 ms, a plain step 40 ms). With every guess accepted by prompt lookup, the tuner settles on
// the length whose measured forward pays best instead of the longest one, and retries the other
// only once its measurement is kForgetRounds old (one slow measurement is not avoided for good).
TEST(SpeculationTunerTest, ALengthWhoseForwardCostsAJumpIsTakenOnlyToRemeasureIt) {
  SpeculationTuner t(0, 16);
  auto forward = [](int k) { return 0.040 + 0.0025 * k + (k + 1 > 16 ? 0.025 : 0.0); };
  t.Record(0, 0, forward(0), 0, 0);
  int sixteen = 0, fifteen = 0;
  for (int i = 0; i < 48; ++i) {
    const int k = t.Choose(16, false);
    ASSERT_GT(k, 0) << i;
    sixteen += k == 16 ? 1 : 0;
    fifteen += k == 15 ? 1 : 0;
    t.Record(k, k, forward(k), 0, 0);
  }
  EXPECT_GE(sixteen, 2);  // measured, and measured again
  EXPECT_LE(sixteen, 4);
  EXPECT_GE(fifteen, 40);
}

// The stats line gives a round's drafting and forward times where they were measured (run, chat
// and bench time each sequence's rounds; serve's shared steps do not).
TEST(SpeculationStatsTest, TheLineGivesARoundsTimesWhereMeasured) {
  SpeculationStats s;
  s.rounds = 4;
  s.guesses = 12;
  s.accepted = 9;
  s.tokens = 13;
  EXPECT_EQ(s.ToString("prompt lookup"), "speculation (prompt lookup): 4 rounds, 3.25 tokens per round, 75% of 12 guesses accepted");
  s.draft_seconds = 0.2;
  s.forward_seconds = 0.1;
  EXPECT_EQ(s.ToString("prompt lookup"),
            "speculation (prompt lookup): 4 rounds, 3.25 tokens per round, 75% of 12 guesses accepted; a round: drafting "
            "50.00 ms, its forward 25.00 ms");
}

// The model at `path` as a draft model for itself.
Result<std::unique_ptr<ModelDrafter>> SelfDrafter(const std::string& path, int64_t n_ctx) {
  Result<model::Model> m = model::Model::Load(path);
  if (!m.ok()) return m.status();
  Result<tokenizer::Vocab> v = tokenizer::Vocab::FromGguf(m->file());
  if (!v.ok()) return v.status();
  return ModelDrafter::Open(path, *v, path, 1, n_ctx);
}

// A draft model's guess time is its own forwards': when the catch-up batch (the tokens the draft
// has not seen) makes the only guess, the time is not measured (-1) rather than 0, which would
// tell the tuner that guessing is free.
TEST(ModelDrafterTest, AGuessMadeByTheCatchUpBatchIsNotTimed) {
  const std::string path = (Models() / "stories260K.gguf").string();
  if (!fs::exists(path)) GTEST_SKIP() << "no shared reference models";
  Result<std::unique_ptr<ModelDrafter>> d = SelfDrafter(path, 128);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::vector<int32_t> tokens = {1, 400, 401, 402}, out;
  double s = 0;
  ASSERT_TRUE((*d)->Draft(0, tokens, 1, &out, &s).ok());  // 4 new tokens, one guess
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(s, -1);
  tokens.push_back(403);  // one new token: its forward is the guess's
  out.clear();
  ASSERT_TRUE((*d)->Draft(0, tokens, 1, &out, &s).ok());
  EXPECT_GT(s, 0);
  tokens.push_back(404);
  tokens.push_back(405);  // two new tokens and three guesses: the two after the catch-up are timed
  out.clear();
  ASSERT_TRUE((*d)->Draft(0, tokens, 3, &out, &s).ok());
  EXPECT_EQ(out.size(), 3u);
  EXPECT_GT(s, 0);
  EXPECT_EQ((*d)->last_catch_up(), 2);
}

// A probe of failing guesses after a gap (plain steps the tuner chose) catches a draft model up
// on the last kGapContext tokens only, so it costs the same however long the gap; the first call
// takes the whole prompt, any other call the whole gap, and guesses keep coming from the partial
// cache.
TEST(ModelDrafterTest, AProbeAfterAGapCatchesUpOnTheLastTokensOnly) {
  const std::string path = (Models() / "stories260K.gguf").string();
  if (!fs::exists(path)) GTEST_SKIP() << "no shared reference models";
  Result<std::unique_ptr<ModelDrafter>> d = SelfDrafter(path, 256);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::vector<int32_t> tokens = {1}, out;
  for (int i = 0; i < 39; ++i) tokens.push_back(300 + i);
  double s = 0;
  ASSERT_TRUE((*d)->Draft(0, tokens, 2, &out, &s).ok());
  EXPECT_EQ((*d)->last_catch_up(), 40);  // the whole prompt
  for (int i = 0; i < 20; ++i) tokens.push_back(400 + i);  // a gap of 20 tokens, not a failing probe
  out.clear();
  ASSERT_TRUE((*d)->Draft(0, tokens, 2, &out, &s).ok());
  EXPECT_EQ((*d)->last_catch_up(), 20);  // the whole gap
  tokens.push_back(out[0]);
  for (int i = 0; i < 50; ++i) tokens.push_back(450 + i);  // a gap of 50 tokens (ids below 512), then a failing probe
  (*d)->set_failing_probe(true);
  for (int round = 0; round < 3; ++round) {
    out.clear();
    ASSERT_TRUE((*d)->Draft(0, tokens, 3, &out, &s).ok());
    EXPECT_EQ(out.size(), 3u);
    if (round == 0) {
      EXPECT_EQ((*d)->last_catch_up(), static_cast<int64_t>(ModelDrafter::kGapContext));
    }
    tokens.push_back(out[0]);  // the first guess accepted, then a correction
    tokens.push_back(7);
  }
  EXPECT_EQ((*d)->last_catch_up(), 1);  // steady rounds: the accepted guess is cached, the correction is new
}

// ---- greedy identity ----

struct Run {
  std::string text;
  GenerateStats stats;
};

Run Generate(const std::string& model, const std::vector<std::string>& workers, const SpeculationOptions& spec,
             const std::string& prompt, int n) {
  EngineOptions o;
  o.model_path = model;
  o.exec.threads = 1;
  o.exec.n_ctx = 256;
  o.exec.workers = workers;
  o.exec.plan.mode = pipeline::PlanMode::kMemory;
  o.exec.log = [](const std::string&) {};
  o.speculation = spec;
  Run r;
  // A worker frees the previous engine's session once it sees that connection close: until then
  // it answers "busy".
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  for (int i = 0; i < 250 && !e.ok() && e.status().message().find("busy") != std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    e = Engine::Open(o);
  }
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return r;
  GenerateOptions g;
  g.n_predict = n;
  g.ignore_eos = true;
  g.sampling.temperature = 0;
  Result<GenerateStats> s = (*e)->Generate(prompt, g, [&](std::string_view t) {
    r.text += t;
    return true;
  });
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (s.ok()) r.stats = *s;
  return r;
}

// Every reference model: plain greedy text, then with prompt lookup and with the model as its
// own draft (every guess accepted), on one node and over two workers: the same text. The draws
// of rounds with rejected guesses come from prompt lookup (the counts are checked).
void CheckGreedyIdentity(const std::vector<std::string>& workers) {
  if (!fs::exists(Models())) GTEST_SKIP() << "no shared reference models";
  int checked = 0;
  int64_t rejected = 0;
  for (const auto& entry : fs::directory_iterator(Models())) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".gguf") continue;
    SCOPED_TRACE(path);
    const std::string prompt = "One day, a little girl said: one two three, one two three";
    const Run plain = Generate(path, workers, {}, prompt, 40);
    ASSERT_EQ(plain.stats.generated_tokens, 40);
    SpeculationOptions lookup;
    lookup.lookup = true;
    const Run l = Generate(path, workers, lookup, prompt, 40);
    EXPECT_EQ(l.text, plain.text);
    // Rounds of a fixed length: the model as its own draft never pays without links (each guess
    // costs a step), so the tuner would not speculate at all.
    SpeculationOptions self;
    self.draft_model = path;
    self.draft_min = self.draft_max = 3;
    const Run d = Generate(path, workers, self, prompt, 40);
    EXPECT_EQ(d.text, plain.text);
    EXPECT_GT(d.stats.speculation.rounds, 0);
    EXPECT_EQ(d.stats.speculation.accepted, d.stats.speculation.guesses) << "a model rejected its own guesses";
    EXPECT_GT(d.stats.speculation.draft_seconds, 0);
    EXPECT_GT(d.stats.speculation.forward_seconds, 0);
    rejected += l.stats.speculation.guesses - l.stats.speculation.accepted;
    ++checked;
  }
  EXPECT_GE(checked, 20);
  EXPECT_GT(rejected, 0) << "no round rejected a guess: the partial-acceptance path went untested";
}

TEST(SpeculativeEngineTest, GreedyTextIsUnchangedByEachDrafterOnOneNode) { CheckGreedyIdentity({}); }

TEST(SpeculativeEngineTest, GreedyTextIsUnchangedByEachDrafterOverTwoWorkers) {
  pipeline::TestWorker w1, w2;
  CheckGreedyIdentity({w1.addr(), w2.addr()});
}

// ---- the cache after a partly accepted round ----

// A fresh cache, then `prompt` in one batch with a greedy sampler: the first token in out->token.
void RunPrompt(exec::Executor& ex, const std::vector<int32_t>& prompt, exec::RunOutput* out) {
  ASSERT_TRUE(ex.Clear().ok());
  model::Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
  exec::RunOptions first;
  first.sample = true;
  sampling::SamplerParams greedy;
  greedy.temperature = 0;
  first.samplers.push_back({0, greedy, prompt});
  ASSERT_TRUE(ex.Run(b, first, out).ok());
}

// Greedy tokens t[0..n) after `prompt` computed one at a time; logits of the step that feeds t[n-1].
void PlainRun(exec::Executor& ex, const std::vector<int32_t>& prompt, int n, std::vector<int32_t>* t,
              std::vector<float>* last_logits) {
  exec::RunOutput out;
  RunPrompt(ex, prompt, &out);
  model::Batch b;
  t->assign(1, out.token);
  exec::RunOptions step;
  step.sample = true;
  step.logits = true;
  for (int i = 1; i <= n; ++i) {
    b.Clear();
    b.Add(t->back(), static_cast<int32_t>(prompt.size() + i - 1), 0, true);
    ASSERT_TRUE(ex.Run(b, step, &out).ok());
    if (i == n) last_logits->assign(out.logits, out.logits + ex.params().n_vocab);
    t->push_back(out.token);
  }
}

void CheckCacheAfterPartialAcceptance(exec::Executor& ex) {
  const std::vector<int32_t> prompt = {1, 15, 27, 301, 44, 12, 9, 120, 77};
  std::vector<int32_t> t;
  std::vector<float> want;
  PlainRun(ex, prompt, 6, &t, &want);  // t[0..6]
  const auto P = static_cast<int32_t>(prompt.size());
  // The same, speculating: the prompt, then t0 with guesses t1 (right) and two wrong ones.
  exec::RunOutput out;
  RunPrompt(ex, prompt, &out);
  ASSERT_EQ(out.token, t[0]);
  model::Batch b;
  const int32_t wrong = (t[2] + 1) % static_cast<int32_t>(ex.params().n_vocab);
  b.Clear();
  b.Add(t[0], P, 0, true);
  b.Add(t[1], P + 1, 0, true);
  b.Add(wrong, P + 2, 0, true);
  b.Add(wrong, P + 3, 0, true);
  exec::RunOptions verify;
  verify.sample = true;
  verify.guesses = {t[1], wrong, wrong, -1};
  ASSERT_TRUE(ex.Run(b, verify, &out).ok());
  ASSERT_EQ(out.tokens, (std::vector<int32_t>{t[1], t[2], -1, -1}));  // t1 accepted, t2 the correction
  EXPECT_EQ(out.token, t[2]);
  // Next round: the two rejected cells dropped in order with the batch; t2 with guesses t3, t4.
  b.Clear();
  b.Add(t[2], P + 2, 0, true);
  b.Add(t[3], P + 3, 0, true);
  b.Add(t[4], P + 4, 0, true);
  exec::RunOptions next;
  next.sample = true;
  next.truncate.push_back({0, P + 2});
  next.guesses = {t[3], t[4], -1};
  ASSERT_TRUE(ex.Run(b, next, &out).ok());
  ASSERT_EQ(out.tokens, (std::vector<int32_t>{t[3], t[4], t[5]}));
  // A plain step after that sees the cache a plain run built: the same logits, to the bit.
  b.Clear();
  b.Add(t[5], P + 5, 0, true);
  exec::RunOptions step;
  step.sample = true;
  step.logits = true;
  ASSERT_TRUE(ex.Run(b, step, &out).ok());
  ASSERT_EQ(out.n_rows, 1);
  EXPECT_EQ(std::memcmp(out.logits, want.data(), want.size() * sizeof(float)), 0);
  EXPECT_EQ(out.token, t[6]);
}

TEST(SpeculativeEngineTest, TheCacheAfterAPartlyAcceptedRoundIsAPlainRunsOnOneNodeAndSplit) {
  const std::string path = (Models() / "tiny-q4_k_m.gguf").string();
  if (!fs::exists(path)) GTEST_SKIP() << "no shared reference models";
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  {
    exec::LocalExecutor ex(*m, 128, 1);
    CheckCacheAfterPartialAcceptance(ex);
  }
  pipeline::TestWorker w1, w2;
  pipeline::ExecutorOptions o;
  o.workers = {w1.addr(), w2.addr()};
  o.threads = 1;
  o.n_ctx = 128;
  o.plan.mode = pipeline::PlanMode::kMemory;
  o.log = [](const std::string&) {};
  Result<std::unique_ptr<exec::Executor>> ex = pipeline::OpenExecutor(*m, path, o);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  ASSERT_EQ((*ex)->stages().size(), 3u);
  CheckCacheAfterPartialAcceptance(**ex);
}

TEST(SpeculativeEngineTest, ADraftModelWithAnotherVocabularyIsRefused) {
  const std::string model = (Models() / "tiny-q4_k_m.gguf").string();
  const std::string draft = (Models() / "aidreams260K.gguf").string();  // 512 tokens, other texts
  if (!fs::exists(model) || !fs::exists(draft)) GTEST_SKIP() << "no shared reference models";
  EngineOptions o;
  o.model_path = model;
  o.exec.threads = 1;
  o.exec.n_ctx = 128;
  o.speculation.draft_model = draft;
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("draft model " + draft), std::string::npos) << e.status().ToString();
  EXPECT_NE(e.status().message().find("vocabulary"), std::string::npos) << e.status().ToString();
  EXPECT_NE(e.status().message().find("token 259 is"), std::string::npos) << e.status().ToString();
  o.speculation.draft_model = model;
  o.speculation.lookup = true;
  EXPECT_FALSE(Engine::Open(o).ok());  // two drafters
}

// Sampled verification on a real tiny model: over many seeds, the token a verification returns
// at the first row follows the model's distribution there (temperature 1, no filters), whether
// the guess is the likeliest token or an unlikely one.
TEST(SpeculativeEngineTest, SampledVerificationKeepsTheModelsDistribution) {
  const std::string path = (Models() / "stories260K.gguf").string();
  if (!fs::exists(path)) GTEST_SKIP() << "no shared reference models";
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok());
  exec::LocalExecutor ex(*m, 64, 1);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 285};
  const auto P = static_cast<int32_t>(prompt.size());
  const int64_t n_vocab = m->params().n_vocab;
  model::Batch b;
  for (int32_t i = 0; i < P; ++i) b.Add(prompt[i], i, 0, i + 1 == P);
  exec::RunOptions o;
  o.logits = true;
  exec::RunOutput out;
  ASSERT_TRUE(ex.Run(b, o, &out).ok());
  std::vector<double> p(out.logits, out.logits + n_vocab);
  const double mx = *std::max_element(p.begin(), p.end());
  double z = 0;
  for (double& v : p) z += (v = std::exp(v - mx));
  for (double& v : p) v /= z;
  const int32_t likeliest = static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
  // The categories with at least 2% of the mass, the rest pooled.
  std::vector<int32_t> cats;
  for (int32_t t = 0; t < n_vocab; ++t) {
    if (p[t] >= 0.02) cats.push_back(t);
  }
  ASSERT_GE(cats.size(), 3u) << "the model is too sure of itself here for a useful test";
  int32_t unlikely = 0;
  while (p[unlikely] >= 0.02 || p[unlikely] < 1e-4) ++unlikely;
  for (int32_t guess : {likeliest, cats[1], unlikely}) {
    SCOPED_TRACE(guess);
    const int n = 3000;
    std::map<int32_t, int> counts;
    int accepted = 0;
    for (int i = 0; i < n; ++i) {
      b.Clear();
      b.Add(prompt[P - 1], P - 1, 0, true);
      b.Add(guess, P, 0, true);
      exec::RunOptions v;
      v.sample = true;
      v.truncate.push_back({0, P - 1});
      sampling::SamplerParams sp;
      sp.temperature = 1;
      sp.top_k = 0;
      sp.top_p = 1;
      sp.min_p = 0;
      sp.seed = 1000 + i;
      v.samplers.push_back({0, sp, prompt});
      v.guesses = {guess, -1};
      ASSERT_TRUE(ex.Run(b, v, &out).ok());
      ASSERT_EQ(out.tokens.size(), 2u);
      const int32_t t0 = out.tokens[0];
      ++counts[t0];
      accepted += t0 == guess ? 1 : 0;
      // After an accepted guess the next row is sampled too; after a rejection it is not.
      EXPECT_EQ(out.tokens[1] >= 0, t0 == guess);
    }
    double chi2 = 0, rest_p = 1;
    int rest = n;
    for (int32_t c : cats) {
      const double e = p[c] * n;
      chi2 += (counts[c] - e) * (counts[c] - e) / e;
      rest_p -= p[c];
      rest -= counts[c];
    }
    chi2 += (rest - rest_p * n) * (rest - rest_p * n) / (rest_p * n);
    // cats.size() degrees of freedom; the p = 0.001 bound by Wilson and Hilferty's approximation.
    const double df = static_cast<double>(cats.size()), h = 2 / (9 * df);
    const double bound = df * std::pow(1 - h + 3.09 * std::sqrt(h), 3);
    EXPECT_LT(chi2, bound) << cats.size() << " categories";
    EXPECT_NEAR(accepted, n * p[guess], 4 * std::sqrt(n * p[guess] * (1 - p[guess])) + 1);
  }
}

}  // namespace
}  // namespace tandem::engine
