#include "sampling/steps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tandem::sampling {
namespace {

Candidates From(std::vector<float> logits) {
  Candidates c;
  c.Reset(logits);
  return c;
}

std::vector<int32_t> Ids(const Candidates& c) {
  std::vector<int32_t> ids;
  for (const TokenCandidate& t : c.data) ids.push_back(t.id);
  return ids;
}

TEST(StepsTest, ResetNumbersCandidates) {
  Candidates c = From({0.5f, -1.0f, 2.0f});
  ASSERT_EQ(c.data.size(), 3u);
  EXPECT_EQ(Ids(c), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FLOAT_EQ(c.data[2].logit, 2.0f);
  EXPECT_FALSE(c.sorted);
}

TEST(StepsTest, TopKKeepsTheLargestInOrder) {
  Candidates c = From({1, 5, 3, 4, 2});
  TopK(3, &c);
  EXPECT_EQ(Ids(c), (std::vector<int32_t>{1, 3, 2}));
  EXPECT_TRUE(c.sorted);
}

TEST(StepsTest, TopKZeroOrLargeKeepsAll) {
  Candidates c = From({1, 5, 3});
  TopK(0, &c);
  EXPECT_EQ(Ids(c), (std::vector<int32_t>{1, 2, 0}));
  Candidates d = From({1, 5, 3});
  TopK(10, &d);
  EXPECT_EQ(d.data.size(), 3u);
}

TEST(StepsTest, SoftmaxSumsToOne) {
  Candidates c = From({0, std::log(3.0f), -std::numeric_limits<float>::infinity()});
  Softmax(&c);
  EXPECT_EQ(Ids(c), (std::vector<int32_t>{1, 0, 2}));
  EXPECT_NEAR(c.data[0].p, 0.75, 1e-6);
  EXPECT_NEAR(c.data[1].p, 0.25, 1e-6);
  EXPECT_EQ(c.data[2].p, 0.0f);
}

TEST(StepsTest, TopPKeepsSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05.
  Candidates c = From({std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)});
  TopP(0.75f, 1, &c);
  EXPECT_EQ(Ids(c), (std::vector<int32_t>{0, 1}));
  Candidates d = From({std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)});
  TopP(0.4f, 1, &d);
  EXPECT_EQ(Ids(d), (std::vector<int32_t>{0}));
  Candidates e = From({std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)});
  TopP(0.4f, 3, &e);  // min_keep wins
  EXPECT_EQ(e.data.size(), 3u);
}

TEST(StepsTest, MinPDropsTokensBelowFractionOfBest) {
  // Probabilities relative to the best: 1, 0.5, 0.2, 0.05.
  Candidates c = From({0, std::log(0.5f), std::log(0.2f), std::log(0.05f)});
  MinP(0.1f, 1, &c);
  EXPECT_EQ(Ids(c), (std::vector<int32_t>{0, 1, 2}));
  Candidates d = From({0, std::log(0.5f), std::log(0.2f), std::log(0.05f)});
  MinP(0.0f, 1, &d);
  EXPECT_EQ(d.data.size(), 4u);
}

TEST(StepsTest, TemperatureScalesLogits) {
  Candidates c = From({2, -4});
  Temperature(0.5f, &c);
  EXPECT_FLOAT_EQ(c.data[0].logit, 4);
  EXPECT_FLOAT_EQ(c.data[1].logit, -8);
}

TEST(StepsTest, GreedyTakesFirstHighest) {
  EXPECT_EQ(Greedy(From({1, 7, 3, 7})), 1);
}

TEST(StepsTest, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  TokenHistory h(8);
  h.Accept(0);
  h.Accept(1);
  Candidates c = From({2.0f, -2.0f, 2.0f});
  ApplyPenalties(h, 2.0f, 0.0f, 0.0f, &c);
  EXPECT_FLOAT_EQ(c.data[0].logit, 1.0f);
  EXPECT_FLOAT_EQ(c.data[1].logit, -4.0f);
  EXPECT_FLOAT_EQ(c.data[2].logit, 2.0f);  // not in the history
}

TEST(StepsTest, FrequencyAndPresencePenalties) {
  TokenHistory h(8);
  h.Accept(0);
  h.Accept(0);
  h.Accept(0);
  h.Accept(1);
  Candidates c = From({1.0f, 1.0f, 1.0f});
  ApplyPenalties(h, 1.0f, 0.5f, 0.25f, &c);
  EXPECT_FLOAT_EQ(c.data[0].logit, 1.0f - 1.5f - 0.25f);
  EXPECT_FLOAT_EQ(c.data[1].logit, 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(c.data[2].logit, 1.0f);
}

TEST(StepsTest, HistoryForgetsTokensOutsideTheWindow) {
  TokenHistory h(2);
  h.Accept(5);
  h.Accept(6);
  h.Accept(7);
  EXPECT_EQ(h.Count(5), 0);
  EXPECT_EQ(h.Count(6), 1);
  EXPECT_EQ(h.Count(7), 1);
  EXPECT_EQ(h.size(), 2u);
  h.Clear();
  EXPECT_EQ(h.Count(7), 0);
  TokenHistory off(0);
  off.Accept(3);
  EXPECT_EQ(off.Count(3), 0);
}

TEST(StepsTest, RngIsReproducibleAndInUnitInterval) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    const double x = a.Uniform();
    EXPECT_EQ(x, b.Uniform());
    EXPECT_GE(x, 0.0);
    EXPECT_LT(x, 1.0);
    differs = differs || x != c.Uniform();
  }
  EXPECT_TRUE(differs);
}

// Draw() over many seeded draws follows the softmax: chi-square with 3 degrees of freedom
// below 16.27 (p = 0.001). The draws are seeded, so the test is deterministic.
TEST(StepsTest, DrawFollowsSoftmax) {
  const std::vector<float> logits = {std::log(0.4f), std::log(0.3f), std::log(0.2f),
                                     std::log(0.1f)};
  const double expected_p[] = {0.4, 0.3, 0.2, 0.1};
  Rng rng(7);
  Candidates c;
  int counts[4] = {0, 0, 0, 0};
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    c.Reset(logits);
    ++counts[Draw(&rng, &c)];
  }
  double chi2 = 0;
  for (int k = 0; k < 4; ++k) {
    const double e = expected_p[k] * n;
    chi2 += (counts[k] - e) * (counts[k] - e) / e;
  }
  EXPECT_LT(chi2, 16.27) << counts[0] << " " << counts[1] << " " << counts[2] << " " << counts[3];
}

TEST(StepsTest, DrawNeverPicksImpossibleTokens) {
  const float ninf = -std::numeric_limits<float>::infinity();
  Rng rng(1);
  Candidates c;
  for (int i = 0; i < 1000; ++i) {
    c.Reset(std::vector<float>{ninf, 0.0f, ninf});
    EXPECT_EQ(Draw(&rng, &c), 1);
  }
}

}  // namespace
}  // namespace tandem::sampling
