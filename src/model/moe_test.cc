// Expert selection against a scalar reference of the router: the softmax in double precision,
// every expert sorted by probability (ties to the lower index), the first k kept and, when asked,
// renormalised.
#include "model/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace tandem::model {
namespace {

void ReferenceRouter(const std::vector<float>& logits, int k, bool normalize, std::vector<int32_t>* experts,
                     std::vector<double>* weights) {
  const int n = static_cast<int>(logits.size());
  double mx = -INFINITY;
  for (float v : logits) mx = std::max<double>(mx, v);
  std::vector<double> p(n);
  double total = 0;
  for (int e = 0; e < n; ++e) total += (p[e] = std::exp(static_cast<double>(logits[e]) - mx));
  for (double& v : p) v /= total;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  experts->assign(order.begin(), order.begin() + k);
  weights->clear();
  double sum = 0;
  for (int32_t e : *experts) sum += p[e];
  for (int32_t e : *experts) weights->push_back(normalize ? p[e] / sum : p[e]);
}

TEST(MoeTest, SelectionMatchesAScalarReferenceOfTheRouter) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  int cases = 0;
  for (int n_expert : {2, 8, 64, 128}) {
    for (int k : {1, 2, 8}) {
      if (k > n_expert) continue;
      for (bool normalize : {false, true}) {
        for (int trial = 0; trial < 50; ++trial) {
          std::vector<float> logits(n_expert);
          for (float& v : logits) v = normal(rng);
          if (trial % 5 == 0) logits[n_expert - 1] = logits[0];  // an exact tie: the lower index wins
          std::vector<int32_t> want_e;
          std::vector<double> want_w;
          ReferenceRouter(logits, k, normalize, &want_e, &want_w);
          std::vector<float> work = logits, got_w(k);
          std::vector<int32_t> got_e(k);
          SelectExperts(work.data(), n_expert, k, normalize, got_e.data(), got_w.data());
          ASSERT_EQ(got_e, want_e) << n_expert << " experts, k " << k << ", trial " << trial;
          for (int j = 0; j < k; ++j) EXPECT_NEAR(got_w[j], want_w[j], 1e-6) << j;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * 50 * (2 + 3 + 3 + 3));
}

}  // namespace
}  // namespace tandem::model
