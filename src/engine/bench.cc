#include "engine/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

namespace tandem::engine {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds to process n prompt tokens (the executor splits them into micro-batches), or to
// generate n tokens one at a time (each token sampled greedily and fed back), with random token
// ids, after `depth` (the tokens in the cache, sequence 0, from position 0; empty: a fresh cache).
// For generation, adds each stage's compute milliseconds to *stage_ms.
Result<double> TimeRun(exec::Executor& ex, int64_t n, bool generate, const std::vector<int32_t>& depth,
                       std::vector<double>* stage_ms, Speculator* spec = nullptr) {
  const int64_t n_vocab = ex.params().n_vocab;
  const int64_t d = static_cast<int64_t>(depth.size());
  std::mt19937 rng(1);
  // The first run of a depth test drops the previous run's tokens after the depth.
  std::vector<exec::Truncation> back;
  if (d > 0) {
    back.push_back({0, static_cast<int32_t>(d)});
  } else {
    TANDEM_RETURN_IF_ERROR(ex.Clear());
  }
  model::Batch b;
  exec::RunOutput out;
  const auto t0 = Clock::now();
  if (!generate) {
    for (int64_t j = 0; j < n; ++j) {
      b.Add(static_cast<int32_t>(rng() % n_vocab), static_cast<int32_t>(d + j), 0, j + 1 == n);
    }
    exec::RunOptions o;
    o.logits = true;  // the last position's logits: the run is complete when they arrive
    o.truncate = back;
    TANDEM_RETURN_IF_ERROR(ex.Run(b, o, &out));
  } else {
    exec::RunOptions first;
    first.sample = true;
    sampling::SamplerParams greedy;
    greedy.temperature = 0;
    first.samplers.push_back({0, greedy, {}});
    first.truncate = back;
    exec::RunOptions step;
    step.sample = true;
    int32_t tok = static_cast<int32_t>(rng() % n_vocab);
    if (spec != nullptr) {
      // The first token from a plain run (it configures the sampler), then speculative steps.
      b.Clear();
      b.Add(tok, static_cast<int32_t>(d), 0, true);
      TANDEM_RETURN_IF_ERROR(ex.Run(b, first, &out));
      std::vector<int32_t> committed = depth, fresh;
      committed.push_back(tok);
      int32_t last = out.token;
      for (int64_t made = 1; made < n;) {
        TANDEM_RETURN_IF_ERROR(spec->Step(ex, 0, &committed, last, static_cast<int>(n - made), &fresh, &out));
        made += static_cast<int64_t>(fresh.size());
        last = fresh.back();
        if (stage_ms->size() < out.stage_ms.size()) stage_ms->resize(out.stage_ms.size());
        for (size_t s = 0; s < out.stage_ms.size(); ++s) (*stage_ms)[s] += out.stage_ms[s];
      }
      return std::chrono::duration<double>(Clock::now() - t0).count();
    }
    for (int64_t j = 0; j < n; ++j) {
      b.Clear();
      b.Add(tok, static_cast<int32_t>(d + j), 0, true);
      TANDEM_RETURN_IF_ERROR(ex.Run(b, j == 0 ? first : step, &out));
      tok = out.token;
      if (stage_ms->size() < out.stage_ms.size()) stage_ms->resize(out.stage_ms.size());
      for (size_t s = 0; s < out.stage_ms.size(); ++s) (*stage_ms)[s] += out.stage_ms[s];
    }
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Result<std::vector<BenchResult>> RunBench(exec::Executor& ex, const BenchOptions& o) {
  if (o.repetitions < 1) return Status::InvalidArgument("repetitions must be at least 1");
  if (o.n_depth < 0) return Status::InvalidArgument("the depth must not be negative");
  if (o.n_depth + std::max(o.n_prompt, o.n_gen) > ex.n_ctx()) {
    return Status::InvalidArgument("bench: depth " + std::to_string(o.n_depth) + " plus " +
                                   std::to_string(std::max(o.n_prompt, o.n_gen)) + " tokens do not fit the context of " +
                                   std::to_string(ex.n_ctx()));
  }
  // The depth's tokens, in the cache once for every test.
  std::vector<int32_t> depth;
  if (o.n_depth > 0) {
    std::mt19937 rng(3);
    model::Batch b;
    for (int64_t j = 0; j < o.n_depth; ++j) {
      depth.push_back(static_cast<int32_t>(rng() % ex.params().n_vocab));
      b.Add(depth.back(), static_cast<int32_t>(j), 0, j + 1 == o.n_depth);
    }
    TANDEM_RETURN_IF_ERROR(ex.Clear());
    exec::RunOptions fill;
    fill.logits = true;
    exec::RunOutput out;
    TANDEM_RETURN_IF_ERROR(ex.Run(b, fill, &out));
  }
  std::vector<BenchResult> results;
  for (bool generate : {false, true}) {
    const int64_t n = generate ? o.n_gen : o.n_prompt;
    if (n <= 0) continue;
    std::vector<double> warm_ms, stage_ms;
    std::unique_ptr<Speculator> spec;
    if (generate && o.drafter != nullptr) spec = std::make_unique<Speculator>(o.drafter, o.speculation);
    TANDEM_RETURN_IF_ERROR(
        TimeRun(ex, generate ? kWarmUpSteps : std::min<int64_t>(n, 32), generate, depth, &warm_ms, spec.get()).status());
    if (spec) spec->ResetStats();
    BenchResult r;
    r.test = (generate ? "tg" : "pp") + std::to_string(n);
    if (o.n_depth > 0) r.test += " @ d" + std::to_string(o.n_depth);
    for (int rep = 0; rep < o.repetitions; ++rep) {
      TANDEM_ASSIGN_OR_RETURN(double s, TimeRun(ex, n, generate, depth, &stage_ms, spec.get()));
      r.tokens_per_s.push_back(n / s);
    }
    if (spec) r.speculation = spec->stats();
    for (double v : r.tokens_per_s) r.mean += v / r.tokens_per_s.size();
    double var = 0;
    for (double v : r.tokens_per_s) var += (v - r.mean) * (v - r.mean) / r.tokens_per_s.size();
    r.stddev = std::sqrt(var);
    if (generate) {
      r.token_ms = 1000.0 / r.mean;
      for (double ms : stage_ms) r.stage_ms.push_back(ms / (static_cast<double>(o.repetitions) * n));
    }
    results.push_back(std::move(r));
  }
  return results;
}

Result<SmallBatchResult> RunSmallBatch(exec::Executor& ex, int64_t n, int64_t at, int repetitions) {
  if (n < 1 || at < 1 || repetitions < 1) return Status::InvalidArgument("small batch: n, position and repetitions must be >= 1");
  if (at + n > ex.n_ctx()) return Status::InvalidArgument("small batch: the context is too small");
  const int64_t n_vocab = ex.params().n_vocab;
  std::mt19937 rng(2);
  TANDEM_RETURN_IF_ERROR(ex.Clear());
  model::Batch b;
  exec::RunOutput out;
  for (int64_t j = 0; j < at; ++j) b.Add(static_cast<int32_t>(rng() % n_vocab), static_cast<int32_t>(j), 0, j + 1 == at);
  exec::RunOptions fill;
  fill.logits = true;
  TANDEM_RETURN_IF_ERROR(ex.Run(b, fill, &out));
  // Each timed run drops what the previous one added, with its own first micro-batch.
  exec::RunOptions o;
  o.logits = true;
  o.truncate.push_back({0, static_cast<int32_t>(at)});
  auto time = [&](int64_t rows) -> Result<double> {
    b.Clear();
    for (int64_t j = 0; j < rows; ++j) b.Add(static_cast<int32_t>(rng() % n_vocab), static_cast<int32_t>(at + j), 0, true);
    const auto t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(ex.Run(b, o, &out));
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  TANDEM_RETURN_IF_ERROR(time(n).status());  // warm-up
  std::vector<double> batch, step;
  for (int r = 0; r < repetitions; ++r) {
    TANDEM_ASSIGN_OR_RETURN(double s1, time(1));
    TANDEM_ASSIGN_OR_RETURN(double sn, time(n));
    step.push_back(s1);
    batch.push_back(sn);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  SmallBatchResult r;
  r.n = n;
  r.at = at;
  r.batch_ms = median(batch);
  r.step_ms = median(step);
  return r;
}

}  // namespace tandem::engine
