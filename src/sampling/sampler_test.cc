#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

// Counts heap allocations, to check that a warm sampler allocates nothing per token. The
// replacement operators pair malloc with free, which GCC cannot see through inlined callers.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace tandem::sampling {
namespace {

SamplerParams Plain(uint64_t seed) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

Sampler Make(const SamplerParams& p) {
  Result<Sampler> s = Sampler::Create(p);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

std::vector<float> Logits(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

// Chi-square statistic of `counts` against `probs` over `n` draws.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi2 = 0;
  for (size_t k = 0; k < probs.size(); ++k) {
    const double e = probs[k] * n;
    chi2 += (counts[k] - e) * (counts[k] - e) / e;
  }
  return chi2;
}

TEST(SamplerTest, DefaultsAreLlamaCpps) {
  const SamplerParams p;
  EXPECT_FLOAT_EQ(p.temperature, 0.8f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.repeat_last_n, 64);
  EXPECT_FLOAT_EQ(p.repeat_penalty, 1.0f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, 0.0f);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.0f);
  EXPECT_EQ(p.seed, kRandomSeed);
}

TEST(SamplerTest, RejectsParametersOutOfRange) {
  auto bad = [](auto edit) {
    SamplerParams p;
    edit(p);
    return Sampler::Create(p).status().code();
  };
  EXPECT_EQ(bad([](SamplerParams& p) { p.temperature = -1; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](SamplerParams& p) { p.temperature = NAN; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](SamplerParams& p) { p.top_k = -2; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](SamplerParams& p) { p.top_p = 0; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](SamplerParams& p) { p.top_p = 1.5f; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](SamplerParams& p) { p.min_p = -0.1f; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](SamplerParams& p) { p.repeat_last_n = -1; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](SamplerParams& p) { p.repeat_penalty = 0; }), Code::kInvalidArgument);
  EXPECT_EQ(bad([](SamplerParams& p) { p.presence_penalty = INFINITY; }), Code::kInvalidArgument);
  EXPECT_TRUE(Sampler::Create(SamplerParams{}).ok());
}

TEST(SamplerTest, RejectsBadLogits) {
  Sampler s = Make(Plain(1));
  EXPECT_EQ(s.Sample({}).status().code(), Code::kInvalidArgument);
  const std::vector<float> nan = {0.0f, NAN};
  EXPECT_EQ(s.Sample(nan).status().code(), Code::kInvalidArgument);
  const std::vector<float> inf = {0.0f, INFINITY};
  EXPECT_EQ(s.Sample(inf).status().code(), Code::kInvalidArgument);
  const std::vector<float> ninf = {-INFINITY, -INFINITY};
  EXPECT_EQ(s.Sample(ninf).status().code(), Code::kInvalidArgument);
}

TEST(SamplerTest, SameSeedSameSequence) {
  const std::vector<float> logits = Logits({0.25, 0.25, 0.2, 0.15, 0.1, 0.05});
  Sampler a = Make(Plain(123)), b = Make(Plain(123)), c = Make(Plain(124));
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(*a.Sample(logits));
    sb.push_back(*b.Sample(logits));
    sc.push_back(*c.Sample(logits));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  a.Reset();
  std::vector<int32_t> again;
  for (int i = 0; i < 200; ++i) again.push_back(*a.Sample(logits));
  EXPECT_EQ(again, sa);
}

// A sampler rebuilt with the draws already made (a sequence resumed on another node) continues
// the random sequence exactly; Reset returns to that point; too many draws to skip are refused.
TEST(SamplerTest, SkipDrawsContinuesTheRandomSequence) {
  const std::vector<float> logits = Logits({0.25, 0.25, 0.2, 0.15, 0.1, 0.05});
  Sampler a = Make(Plain(99));
  std::vector<int32_t> all;
  for (int i = 0; i < 50; ++i) all.push_back(*a.Sample(logits));
  SamplerParams p = Plain(99);
  p.skip_draws = 20;
  Sampler b = Make(p);
  std::vector<int32_t> rest;
  for (int i = 0; i < 30; ++i) rest.push_back(*b.Sample(logits));
  EXPECT_EQ(rest, std::vector<int32_t>(all.begin() + 20, all.end()));
  b.Reset();
  EXPECT_EQ(*b.Sample(logits), all[20]);
  p.skip_draws = kMaxSkipDraws + 1;
  EXPECT_FALSE(Sampler::Create(p).ok());
}

TEST(SamplerTest, RandomSeedIsReported) {
  Sampler s = Make(SamplerParams{});
  EXPECT_NE(s.seed(), kRandomSeed);
}

TEST(SamplerTest, GreedyAtZeroTemperature) {
  SamplerParams p;
  p.temperature = 0;
  p.seed = 5;
  Sampler s = Make(p);
  const std::vector<float> logits = {0.1f, 3.0f, 2.9f, -1.0f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(*s.Sample(logits), 1);
}

// With every filter off and temperature 1, draws follow the softmax of the logits.
TEST(SamplerTest, DistributionMatchesSoftmax) {
  const std::vector<double> probs = {0.35, 0.3, 0.2, 0.1, 0.05};
  const std::vector<float> logits = Logits(probs);
  Sampler s = Make(Plain(2024));
  const int n = 100000;
  std::vector<int> counts(probs.size(), 0);
  for (int i = 0; i < n; ++i) ++counts[*s.Sample(logits)];
  EXPECT_LT(ChiSquare(counts, probs, n), 18.47);  // 4 degrees of freedom, p = 0.001
}

// Speculative verification: whatever the guess (likely, unlikely, or cut by top-k), the token
// Verify returns is distributed as Sample's, and a guess is accepted with its probability.
TEST(SamplerTest, VerifyKeepsTheDistributionWhateverTheGuess) {
  const std::vector<double> probs = {0.35, 0.3, 0.2, 0.1, 0.05};
  const std::vector<float> logits = Logits(probs);
  for (int32_t guess : {0, 3, 4}) {
    SCOPED_TRACE(guess);
    Sampler s = Make(Plain(77 + guess));
    const int n = 100000;
    std::vector<int> counts(probs.size(), 0);
    int accepted = 0;
    for (int i = 0; i < n; ++i) {
      Result<Sampler::Verdict> v = s.Verify(logits, guess);
      ASSERT_TRUE(v.ok());
      ++counts[v->token];
      accepted += v->accepted ? 1 : 0;
      EXPECT_EQ(v->accepted, v->token == guess);
    }
    EXPECT_LT(ChiSquare(counts, probs, n), 18.47);  // 4 degrees of freedom, p = 0.001
    // Accepted n * p(guess) times: within 4 standard deviations.
    const double e = n * probs[guess], sd = std::sqrt(n * probs[guess] * (1 - probs[guess]));
    EXPECT_NEAR(accepted, e, 4 * sd);
  }
  // A guess top-k cuts away is never accepted; the draws stay top-k's.
  SamplerParams k2 = Plain(5);
  k2.top_k = 2;
  Sampler s = Make(k2);
  std::vector<int> counts(probs.size(), 0);
  const int n = 50000;
  for (int i = 0; i < n; ++i) {
    Result<Sampler::Verdict> v = s.Verify(logits, 4);
    ASSERT_TRUE(v.ok());
    EXPECT_FALSE(v->accepted);
    ++counts[v->token];
  }
  EXPECT_EQ(counts[2] + counts[3] + counts[4], 0);
  EXPECT_LT(ChiSquare({counts[0], counts[1]}, {0.35 / 0.65, 0.3 / 0.65}, n), 10.83);
}

// Greedy verification is Sample's greedy pick (penalties included) and takes no draw; sampled
// verification takes one draw when it accepts and two when it rejects.
TEST(SamplerTest, VerifyGreedyAndItsDraws) {
  const std::vector<float> logits = Logits({0.1, 0.5, 0.4});
  SamplerParams g = Plain(1);
  g.temperature = 0;
  g.repeat_penalty = 2.0f;
  Sampler s = Make(g);
  s.Accept(1);  // token 1 penalised: its logit log(0.5) < 0 is doubled, so token 2 wins
  EXPECT_EQ(*s.Sample(logits), 2);
  Result<Sampler::Verdict> v = s.Verify(logits, 2);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->accepted);
  EXPECT_EQ(v->token, 2);
  v = s.Verify(logits, 1);
  EXPECT_FALSE(v->accepted);
  EXPECT_EQ(v->token, 2);
  EXPECT_EQ(s.draws(), 0u);

  SamplerParams p = Plain(3);
  p.skip_draws = 10;
  Sampler h = Make(p);
  EXPECT_EQ(h.draws(), 10u);
  uint64_t expect = 10;
  for (int i = 0; i < 200; ++i) {
    Result<Sampler::Verdict> r = h.Verify(logits, 1);
    ASSERT_TRUE(r.ok());
    expect += r->accepted ? 1 : 2;
    ASSERT_EQ(h.draws(), expect);
  }
  ASSERT_TRUE(h.Sample(logits).ok());
  EXPECT_EQ(h.draws(), expect + 1);
}

// Temperature 0.5 squares the probabilities before normalising.
TEST(SamplerTest, TemperatureSharpens) {
  const std::vector<double> probs = {0.5, 0.3, 0.2};
  SamplerParams p = Plain(99);
  p.temperature = 0.5f;
  Sampler s = Make(p);
  const std::vector<float> logits = Logits(probs);
  double z = 0;
  for (double q : probs) z += q * q;
  std::vector<double> expected;
  for (double q : probs) expected.push_back(q * q / z);
  const int n = 100000;
  std::vector<int> counts(probs.size(), 0);
  for (int i = 0; i < n; ++i) ++counts[*s.Sample(logits)];
  EXPECT_LT(ChiSquare(counts, expected, n), 13.82);  // 2 degrees of freedom, p = 0.001
}

// Top-k 2 leaves the two best tokens, drawn in proportion to their probabilities.
TEST(SamplerTest, TopKRenormalises) {
  SamplerParams p = Plain(31);
  p.top_k = 2;
  Sampler s = Make(p);
  const std::vector<float> logits = Logits({0.1, 0.4, 0.2, 0.3});
  const int n = 50000;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < n; ++i) ++counts[*s.Sample(logits)];
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[2], 0);
  const std::vector<int> kept = {counts[1], counts[3]};
  EXPECT_LT(ChiSquare(kept, {4.0 / 7, 3.0 / 7}, n), 10.83);  // 1 degree of freedom, p = 0.001
}

TEST(SamplerTest, TopPAndMinPCutTheTail) {
  SamplerParams p = Plain(8);
  p.top_p = 0.75f;  // keeps 0.5 and 0.3
  Sampler s = Make(p);
  const std::vector<float> logits = Logits({0.5, 0.3, 0.15, 0.05});
  SamplerParams q = Plain(8);
  q.min_p = 0.35f;  // keeps tokens with p >= 0.175
  Sampler m = Make(q);
  for (int i = 0; i < 5000; ++i) {
    EXPECT_LT(*s.Sample(logits), 2);
    EXPECT_LT(*m.Sample(logits), 2);
  }
}

TEST(SamplerTest, PresencePenaltyAvoidsRecentTokens) {
  SamplerParams p = Plain(17);
  p.presence_penalty = 100.0f;
  p.repeat_last_n = 4;
  Sampler s = Make(p);
  const std::vector<float> logits = {5.0f, 4.0f, 3.0f, 2.0f, 1.0f, 0.0f};
  for (int i = 0; i < 4; ++i) s.Accept(i);
  for (int i = 0; i < 1000; ++i) EXPECT_GE(*s.Sample(logits), 4);
  for (int i = 0; i < 4; ++i) s.Accept(5);  // the window now holds only token 5
  int zeros = 0;
  for (int i = 0; i < 1000; ++i) zeros += *s.Sample(logits) == 0;
  EXPECT_GT(zeros, 500);
}

TEST(SamplerTest, NoAllocationPerTokenOnceWarm) {
  SamplerParams p;  // the default chain, with penalties on
  p.seed = 3;
  p.repeat_penalty = 1.1f;
  p.frequency_penalty = 0.1f;
  Sampler s = Make(p);
  std::vector<float> logits(32000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.37f * i) * 4.0f;
  for (int i = 0; i < 70; ++i) s.Accept(*s.Sample(logits) % 100);  // warm: history and buffers
  s.Accept(31999);  // the largest id the history will see
  const long before = g_allocations.load();
  for (int i = 0; i < 500; ++i) {
    Result<int32_t> t = s.Sample(logits);
    if (!t.ok()) break;
    s.Accept(*t);
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace tandem::sampling

namespace tandem::sampling {
namespace {

// --ignore-eos: a banned token is never drawn, greedy or not; banning everything finite is an
// error, not a silent pick; the list is bounded.
TEST(SamplerBannedTest, BannedTokensAreNeverSampled) {
  const std::vector<float> logits = {1.0f, 5.0f, 4.9f, -2.0f};
  SamplerParams greedy;
  greedy.temperature = 0;
  greedy.banned = {1};
  Result<Sampler> g = Sampler::Create(greedy);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g->Sample(logits), 2);
  SamplerParams hot;
  hot.temperature = 2.0f;
  hot.top_k = 0;
  hot.top_p = 1;
  hot.min_p = 0;
  hot.seed = 7;
  hot.banned = {1, 2};
  Result<Sampler> h = Sampler::Create(hot);
  ASSERT_TRUE(h.ok());
  for (int i = 0; i < 200; ++i) {
    Result<int32_t> t = h->Sample(logits);
    ASSERT_TRUE(t.ok());
    EXPECT_TRUE(*t == 0 || *t == 3) << *t;
  }
  greedy.banned = {0, 1, 2, 3};
  EXPECT_FALSE(Sampler::Create(greedy)->Sample(logits).ok());
  greedy.banned.assign(kMaxBannedTokens + 1, 0);
  EXPECT_FALSE(Sampler::Create(greedy).ok());
  greedy.banned = {-1};
  EXPECT_FALSE(Sampler::Create(greedy).ok());
}

}  // namespace
}  // namespace tandem::sampling
