#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

namespace tandem::sampling {
namespace {

Status Bad(const char* name, double value, const std::string& rule) {
  return Status::InvalidArgument("sampler: " + std::string(name) + " = " + std::to_string(value) +
                                 " (must be " + rule + ")");
}

Status Validate(const SamplerParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return Bad("temperature", p.temperature, ">= 0");
  }
  if (p.top_k < 0) return Bad("top_k", p.top_k, ">= 0");
  if (!(p.top_p > 0 && p.top_p <= 1)) return Bad("top_p", p.top_p, "in (0, 1]");
  if (!(p.min_p >= 0 && p.min_p <= 1)) return Bad("min_p", p.min_p, "in [0, 1]");
  if (p.repeat_last_n < 0 || p.repeat_last_n > kMaxRepeatLastN) {
    return Bad("repeat_last_n", p.repeat_last_n, "in [0, " + std::to_string(kMaxRepeatLastN) + "]");
  }
  if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty <= 0) {
    return Bad("repeat_penalty", p.repeat_penalty, "> 0");
  }
  if (!std::isfinite(p.frequency_penalty))
    return Bad("frequency_penalty", p.frequency_penalty, "finite");
  if (!std::isfinite(p.presence_penalty))
    return Bad("presence_penalty", p.presence_penalty, "finite");
  if (p.banned.size() > kMaxBannedTokens) {
    return Status::InvalidArgument("sampler: " + std::to_string(p.banned.size()) + " banned tokens (limit " +
                                   std::to_string(kMaxBannedTokens) + ")");
  }
  for (int32_t t : p.banned) {
    if (t < 0) return Status::InvalidArgument("sampler: a banned token id is negative");
  }
  if (p.skip_draws > kMaxSkipDraws) {
    return Bad("skip_draws", static_cast<double>(p.skip_draws), "<= " + std::to_string(kMaxSkipDraws));
  }
  return Status::Ok();
}

}  // namespace

Sampler::Sampler(const SamplerParams& params, uint64_t seed)
    : params_(params),
      seed_(seed),
      rng_(seed),
      draws_(params.skip_draws),
      history_(static_cast<size_t>(params.repeat_last_n)) {
  rng_.Skip(params.skip_draws);
}

Result<Sampler> Sampler::Create(const SamplerParams& params) {
  TANDEM_RETURN_IF_ERROR(Validate(params));
  uint64_t seed = params.seed;
  if (seed == kRandomSeed) {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  return Sampler(params, seed);
}

Result<bool> Sampler::Prepare(std::span<const float> logits) {
  if (logits.empty()) return Status::InvalidArgument("sampler: no logits");
  if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::InvalidArgument("sampler: more logits than token ids");
  }
  bool any_finite = false;
  for (float l : logits) {
    if (std::isnan(l) || l == std::numeric_limits<float>::infinity()) {
      return Status::InvalidArgument("sampler: logits hold NaN or +infinity");
    }
    any_finite = any_finite || std::isfinite(l);
  }
  if (!any_finite) return Status::InvalidArgument("sampler: every logit is -infinity");
  const SamplerParams& p = params_;
  candidates_.Reset(logits);
  if (!p.banned.empty()) {
    bool left = false;
    for (int32_t t : p.banned) {
      if (static_cast<size_t>(t) < logits.size()) candidates_.data[t].logit = -std::numeric_limits<float>::infinity();
    }
    for (const TokenCandidate& c : candidates_.data) left = left || std::isfinite(c.logit);
    if (!left) return Status::InvalidArgument("sampler: every token that is not banned has logit -infinity");
  }
  ApplyPenalties(history_, p.repeat_penalty, p.frequency_penalty, p.presence_penalty, &candidates_);
  if (p.temperature <= 0) return true;
  TopK(p.top_k, &candidates_);
  TopP(p.top_p, 1, &candidates_);
  MinP(p.min_p, 1, &candidates_);
  Temperature(p.temperature, &candidates_);
  return false;
}

Result<int32_t> Sampler::Sample(std::span<const float> logits) {
  TANDEM_ASSIGN_OR_RETURN(bool greedy, Prepare(logits));
  if (greedy) return Greedy(candidates_);
  ++draws_;
  return Draw(&rng_, &candidates_);
}

Result<Sampler::Verdict> Sampler::Verify(std::span<const float> logits, int32_t guess) {
  TANDEM_ASSIGN_OR_RETURN(bool greedy, Prepare(logits));
  Verdict v;
  if (greedy) {
    v.token = Greedy(candidates_);
    v.accepted = v.token == guess;
    return v;
  }
  Softmax(&candidates_);
  auto it = std::find_if(candidates_.data.begin(), candidates_.data.end(),
                         [&](const TokenCandidate& c) { return c.id == guess; });
  const double p_guess = it == candidates_.data.end() ? 0.0 : it->p;
  if (Uniform() < p_guess) {
    v.token = guess;
    v.accepted = true;
    return v;
  }
  // Rejected: p(guess) < 1, so another candidate has probability left. Draw re-normalises.
  if (it != candidates_.data.end()) candidates_.data.erase(it);
  ++draws_;
  v.token = Draw(&rng_, &candidates_);
  return v;
}

void Sampler::Reset() {
  history_.Clear();
  rng_ = Rng(seed_);
  rng_.Skip(params_.skip_draws);
  draws_ = params_.skip_draws;
}

}  // namespace tandem::sampling
