#include "sampling/steps.h"

#include <algorithm>
#include <cmath>

namespace tandem::sampling {
namespace {

bool ByLogitDesc(const TokenCandidate& a, const TokenCandidate& b) {
  return a.logit > b.logit;
}

void SortIfNeeded(Candidates* c) {
  if (c->sorted) return;
  std::sort(c->data.begin(), c->data.end(), ByLogitDesc);
  c->sorted = true;
}

}  // namespace

void Candidates::Reset(std::span<const float> logits) {
  data.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    data[i] = {static_cast<int32_t>(i), logits[i], 0.0f};
  }
  sorted = false;
}

void TokenHistory::Accept(int32_t id) {
  if (ring_.empty()) return;
  if (static_cast<size_t>(id) >= counts_.size()) counts_.resize(static_cast<size_t>(id) + 1, 0);
  if (size_ == ring_.size()) {
    --counts_[ring_[next_]];  // forget the oldest
  } else {
    ++size_;
  }
  ring_[next_] = id;
  ++counts_[id];
  next_ = (next_ + 1) % ring_.size();
}

void TokenHistory::Clear() {
  std::fill(counts_.begin(), counts_.end(), 0);
  next_ = 0;
  size_ = 0;
}

void ApplyPenalties(const TokenHistory& history, float repeat, float frequency, float presence,
                    Candidates* c) {
  if (history.size() == 0 || (repeat == 1.0f && frequency == 0.0f && presence == 0.0f)) return;
  for (TokenCandidate& t : c->data) {
    const int count = history.Count(t.id);
    if (count == 0) continue;
    t.logit = t.logit <= 0 ? t.logit * repeat : t.logit / repeat;
    t.logit -= static_cast<float>(count) * frequency + presence;
  }
  c->sorted = false;
}

void TopK(int k, Candidates* c) {
  if (k <= 0 || static_cast<size_t>(k) >= c->data.size()) {
    SortIfNeeded(c);
    return;
  }
  if (!c->sorted) {
    std::partial_sort(c->data.begin(), c->data.begin() + k, c->data.end(), ByLogitDesc);
  }
  c->data.resize(static_cast<size_t>(k));
  c->sorted = true;
}

void Softmax(Candidates* c) {
  SortIfNeeded(c);
  if (c->data.empty()) return;
  const float max = c->data[0].logit;
  double sum = 0;
  for (TokenCandidate& t : c->data) {
    t.p = std::exp(t.logit - max);
    sum += t.p;
  }
  for (TokenCandidate& t : c->data) t.p = static_cast<float>(t.p / sum);
}

void TopP(float top_p, size_t min_keep, Candidates* c) {
  if (top_p >= 1.0f) return;
  Softmax(c);
  double cum = 0;
  size_t keep = c->data.size();
  for (size_t i = 0; i < c->data.size(); ++i) {
    cum += c->data[i].p;
    if (cum >= top_p && i + 1 >= min_keep) {
      keep = i + 1;
      break;
    }
  }
  c->data.resize(keep);
}

void MinP(float min_p, size_t min_keep, Candidates* c) {
  if (min_p <= 0.0f || c->data.empty()) return;
  SortIfNeeded(c);
  // p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)
  const float threshold = c->data[0].logit + std::log(min_p);
  size_t keep = 0;
  while (keep < c->data.size() && (c->data[keep].logit >= threshold || keep < min_keep)) ++keep;
  c->data.resize(keep);
}

void Temperature(float temperature, Candidates* c) {
  for (TokenCandidate& t : c->data) t.logit /= temperature;
}

int32_t Greedy(const Candidates& c) {
  const auto best = std::max_element(
      c.data.begin(), c.data.end(),
      [](const TokenCandidate& a, const TokenCandidate& b) { return a.logit < b.logit; });
  return best->id;
}

int32_t Draw(Rng* rng, Candidates* c) {
  Softmax(c);
  const double u = rng->Uniform();
  double cum = 0;
  for (const TokenCandidate& t : c->data) {
    cum += t.p;
    if (u < cum) return t.id;
  }
  // Rounding left the sum a hair under 1: the last token that has any probability.
  for (auto it = c->data.rbegin(); it != c->data.rend(); ++it) {
    if (it->p > 0) return it->id;
  }
  return c->data.front().id;
}

}  // namespace tandem::sampling
