#include "model/moe.h"

#include <algorithm>
#include <cmath>

namespace tandem::model {

void SelectExperts(float* logits, int64_t n_expert, int64_t k, bool normalize, int32_t* experts, float* weights) {
  const float mx = *std::max_element(logits, logits + n_expert);
  float total = 0;
  for (int64_t e = 0; e < n_expert; ++e) total += (logits[e] = std::exp(logits[e] - mx));
  for (int64_t e = 0; e < n_expert; ++e) logits[e] /= total;
  // k passes of an argmax over the experts not chosen yet: k is small (2 to 8) and so is n_expert
  // (up to a few hundred), and the strict '>' keeps the lower index on a tie.
  float sum = 0;
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < n_expert; ++e) {
      if (std::find(experts, experts + j, e) != experts + j) continue;
      if (best < 0 || logits[e] > logits[best]) best = e;
    }
    experts[j] = best;
    weights[j] = logits[best];
    sum += logits[best];
  }
  if (normalize && sum > 0) {
    for (int64_t j = 0; j < k; ++j) weights[j] /= sum;
  }
}

}  // namespace tandem::model
