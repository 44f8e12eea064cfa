// SamplerSet: the samplers of the sequences a last stage serves, keyed by sequence id. The main
// node owns the committed tokens of every sequence and configures a sequence's sampler with them;
// the sampler then records each token it samples, so penalties and seeded draws follow the
// sequence wherever its last stage runs.
//
// Thread safety: none; one call at a time.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "base/status.h"
#include "sampling/sampler.h"

namespace tandem::exec {

class SamplerSet {
 public:
  Status Configure(int32_t seq, const sampling::SamplerParams& p, const std::vector<int32_t>& history);
  // Samples from `logits` with the sequence's sampler and records the token.
  Result<int32_t> SampleAndAccept(int32_t seq, std::span<const float> logits);
  // Verifies `guess` (Sampler::Verify) with the sequence's sampler and records the token.
  Result<sampling::Sampler::Verdict> VerifyAndAccept(int32_t seq, std::span<const float> logits, int32_t guess);
  void Clear() { samplers_.clear(); }

 private:
  std::map<int32_t, sampling::Sampler> samplers_;
};

}  // namespace tandem::exec
