// Bench: prompt processing (pp) and generation (tg) speed of an Executor, as llama-bench
// measures them: random token ids, a fresh cache per repetition (or one holding only the n_depth
// tokens of a depth test), one warm-up run per test. For
// generation each stage's compute time per token is summed too, so the rest of a token's time
// (network and waiting) can be shown beside it.
//
// Thread safety: one run at a time per executor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/speculative.h"
#include "exec/executor.h"

namespace tandem::engine {

struct BenchOptions {
  int64_t n_prompt = 512;  // 0: no pp test
  int64_t n_gen = 128;     // 0: no tg test
  // Tokens already in the cache when each test starts (llama-bench's -d): filled once, untimed,
  // and every run truncates back to them, so pp and tg are timed at positions n_depth on.
  int64_t n_depth = 0;
  int repetitions = 3;
  // Generation with speculative decoding (null: plain steps), greedy as always.
  Drafter* drafter = nullptr;
  SpeculationOptions speculation;  // its --draft-min / --draft-max
};

struct BenchResult {
  std::string test;                   // "pp512", "tg128", "pp512 @ d4096"
  std::vector<double> tokens_per_s;   // one per repetition
  double mean = 0, stddev = 0;        // of tokens_per_s
  // Generation only: per stage, compute milliseconds per token (averaged over repetitions), and
  // the time of a whole token.
  std::vector<double> stage_ms;
  double token_ms = 0;
  SpeculationStats speculation;  // generation with a drafter: over every repetition
};

// Generation first runs this many steps untimed (a warm-up), then the timed ones.
inline constexpr int64_t kWarmUpSteps = 4;

Result<std::vector<BenchResult>> RunBench(exec::Executor& executor, const BenchOptions& options);

// A small batch against a decode step, as speculative verification and a server's batch see it:
// with `at` tokens of one sequence in the cache, the time of a forward of `n` more tokens of it
// (every row's logits) and of a 1-token step at the same position, alternated `repetitions` times
// (the cache truncated back to `at` after each); medians in milliseconds.
struct SmallBatchResult {
  int64_t n = 0, at = 0;
  double batch_ms = 0, step_ms = 0;
};
Result<SmallBatchResult> RunSmallBatch(exec::Executor& executor, int64_t n, int64_t at, int repetitions);

}  // namespace tandem::engine
