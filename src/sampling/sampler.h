// Sampler: picks the next token from a row of logits, by a fixed chain of steps (steps.h):
//
//   penalties over the last repeat_last_n tokens -> top-k -> top-p -> min-p -> temperature -> draw
//
// as llama.cpp's default chain does; temperature <= 0 picks the highest logit after the
// penalties (greedy). The filters see the logits before temperature, as in llama.cpp. A fixed
// seed makes the sequence of draws reproducible for the same logits and accepted tokens.
//
// After the first token, Sample() allocates nothing: the candidates array and the history keep
// their memory (the history grows only when it sees a larger token id than before).
//
// Thread safety: none; one sampler per sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "sampling/steps.h"

namespace tandem::sampling {

// Seed value that asks for a random seed (from std::random_device), as llama.cpp's default.
inline constexpr uint64_t kRandomSeed = 0xFFFFFFFF;

// Defaults are llama.cpp's (common_params_sampling).
struct SamplerParams {
  float temperature = 0.8f;     // <= 0: greedy
  int top_k = 40;               // 0: off
  float top_p = 0.95f;          // 1: off
  float min_p = 0.05f;          // 0: off
  int repeat_last_n = 64;       // window of the penalties, in tokens; 0: off
  float repeat_penalty = 1.0f;  // 1: off
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = kRandomSeed;
  // Tokens that are never sampled (their logits count as -infinity): --ignore-eos bans the
  // end-of-generation tokens, as llama.cpp does. At most kMaxBannedTokens.
  std::vector<int32_t> banned;
  // The random sequence starts this many draws in: a sequence whose sampler is rebuilt elsewhere
  // (a pipeline resumed on other nodes) continues its draws where they were. At most kMaxSkipDraws.
  uint64_t skip_draws = 0;
};
inline constexpr size_t kMaxBannedTokens = 256;
inline constexpr uint64_t kMaxSkipDraws = uint64_t{1} << 24;
// The largest penalty window (llama.cpp's -1, the whole context, is given as the context size).
inline constexpr int kMaxRepeatLastN = 1 << 16;

class Sampler {
 public:
  // InvalidArgument naming the first parameter out of range.
  static Result<Sampler> Create(const SamplerParams& params);

  const SamplerParams& params() const { return params_; }
  // The seed in use (the random one drawn, if kRandomSeed was asked for).
  uint64_t seed() const { return seed_; }

  // The next token for `logits` (one per vocabulary entry). InvalidArgument if `logits` is
  // empty, holds NaN or +infinity, or is -infinity throughout. Does not record the token: call
  // Accept() with the token that is kept.
  Result<int32_t> Sample(std::span<const float> logits);

  // Speculative verification of a guessed next token (a deterministic guess: a prompt lookup's,
  // or a draft model's greedy pick). Greedy: the token Sample() would give; accepted when it is
  // the guess. Otherwise the rule of speculative sampling for a draft that puts all its mass on
  // the guess: accepted with probability p(guess) under the final distribution p (after
  // penalties, filters and temperature); when rejected, the token is drawn from p without the
  // guess, renormalised. Either way the token returned is distributed as Sample()'s, which is
  // what keeps speculation from changing the output's distribution. Uses one random draw when
  // accepted, two when rejected (draws()), none when greedy. Does not record the token.
  struct Verdict {
    int32_t token = -1;
    bool accepted = false;
  };
  Result<Verdict> Verify(std::span<const float> logits, int32_t guess);
  // Random draws taken so far (Sample: one per call unless greedy; Verify: as above), counting
  // params().skip_draws.
  uint64_t draws() const { return draws_; }

  // Records a token of the sequence (prompt or generated) for the penalties. REQUIRES: id >= 0.
  void Accept(int32_t id) { history_.Accept(id); }
  // Forgets the history and restarts the random sequence from the seed.
  void Reset();

 private:
  Sampler(const SamplerParams& params, uint64_t seed);
  // Checks the logits and runs the chain up to the draw into candidates_; true when greedy.
  Result<bool> Prepare(std::span<const float> logits);
  double Uniform() {
    ++draws_;
    return rng_.Uniform();
  }

  SamplerParams params_;
  uint64_t seed_;
  Rng rng_;
  uint64_t draws_ = 0;
  TokenHistory history_;
  Candidates candidates_;
};

}  // namespace tandem::sampling
