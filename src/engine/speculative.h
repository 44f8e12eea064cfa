// Speculative decoding: the main node guesses several next tokens of a sequence and the model
// verifies them in one forward, so a round trip through the pipeline (every hop's latency) yields
// several tokens instead of one.
//
// A round: the sequence's last sampled token (not yet in the cache) and k guesses after it go
// through every stage as one batch, every row marked; the last stage verifies the guesses in order
// with the sequence's sampler (exec::RunOptions::guesses, sampling::Sampler::Verify) and returns
// the accepted ones plus one more token: the correction of the first rejected guess, or the token
// after the last guess. The next round's batch truncates the sequence's cache back to the accepted
// length, in order with its data, on every stage. Greedy verification returns exactly the tokens
// plain decoding would (the kernels give a row the same bits alone and in a batch); sampled
// verification keeps the output's distribution (Sampler::Verify's rule).
//
// Drafters, on the main node:
//  - LookupDrafter (`--lookup`): prompt lookup. The longest recent n-gram of the sequence that
//    occurred before; the guesses are what followed it then. No model, nearly free.
//  - ModelDrafter (`-md FILE`): a smaller model with the same vocabulary, run on this machine with
//    its own KV cache (one sequence per sequence it drafts for); its greedy continuation is the
//    guess. A probe of failing guesses (after rounds without any) catches it up on the last
//    kGapContext tokens only.
//
// How many guesses a round takes (SpeculationTuner): the k in {0} and [draft_min, draft_max] with
// the most expected tokens per second, from the measured acceptance rate a (a round of k guesses
// yields 1 + a + ... + a^k tokens on average), the measured time of a plain step, the measured extra
// time per verified row, and the drafter's measured time per guess. k = 0 is a plain step: a round
// that will not pay is not speculated (no links and failing guesses: no slower than without).
// While it does not pay, a probe now and then keeps the acceptance current: after 8 plain steps,
// then 16, 32, ... 128, and never sooner than the last round's measured cost allows (kProbeBudget
// of the plain steps between two: a draft model as large as the model costs its catch-up batch
// and a guess per probe, two or three steps).
// With --draft-min equal to --draft-max (and above 0) the length is the user's: every round with
// guesses takes that many (vLLM's fixed num_speculative_tokens), whatever the measurements say.
//
// Thread safety: none; one sequence's rounds at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/executor.h"
#include "model/model.h"
#include "tokenizer/vocab.h"

namespace tandem::engine {

struct SpeculationOptions {
  bool lookup = false;      // --lookup
  std::string draft_model;  // -md / --model-draft
  int draft_max = 16;       // --draft-max: most guesses per round
  int draft_min = 0;        // --draft-min: fewer guesses than this are not verified
  int lookup_ngram_max = 4, lookup_ngram_min = 1;
  // The draft model's threads and context (the engine passes its own).
  int threads = 1;
  int64_t n_ctx = 4096;
  bool enabled() const { return lookup || !draft_model.empty(); }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // Appends up to `n` guesses of the tokens that follow `tokens` (a sequence's tokens so far,
  // prompt included) to *out; fewer, or none, when it has no good guess. *guess_seconds: the time
  // the guesses themselves took (a draft model's catching up with new tokens left out), or -1 when
  // it was not measured (the catch-up batch made the only guess).
  // `seq` names the sequence (a server's slot), for a drafter that keeps state per sequence.
  virtual Status Draft(int32_t seq, std::span<const int32_t> tokens, int n, std::vector<int32_t>* out,
                       double* guess_seconds) = 0;
  // Whether drafting costs compute on this machine (the tuner then weighs its measured time).
  virtual bool costly() const = 0;
  // What a guess is expected to cost relative to the model's compute per token, before it is
  // measured (0: no idea).
  virtual double relative_cost() const { return 0; }
  // Whether the next Draft is a probe of guesses that have been failing: a drafter with state to
  // catch up may then catch up on less (see ModelDrafter).
  virtual void set_failing_probe(bool) {}
  // Tokens the sequence's sampler never picks (--ignore-eos): not worth guessing.
  void set_banned(std::vector<int32_t> banned) { banned_ = std::move(banned); }

 protected:
  bool banned(int32_t t) const { return std::find(banned_.begin(), banned_.end(), t) != banned_.end(); }
  std::vector<int32_t> banned_;
};

class LookupDrafter : public Drafter {
 public:
  LookupDrafter(int ngram_max, int ngram_min) : ngram_max_(ngram_max), ngram_min_(ngram_min) {}
  std::string name() const override { return "prompt lookup"; }
  Status Draft(int32_t seq, std::span<const int32_t> tokens, int n, std::vector<int32_t>* out,
               double* guess_seconds) override;
  bool costly() const override { return false; }

 private:
  int ngram_max_, ngram_min_;
};

class ModelDrafter : public Drafter {
 public:
  // Loads the draft model, refusing it (InvalidArgument naming both files) when its vocabulary
  // is not `target`'s token for token.
  static Result<std::unique_ptr<ModelDrafter>> Open(const std::string& path, const tokenizer::Vocab& target,
                                                    const std::string& target_path, int threads, int64_t n_ctx);
  std::string name() const override { return "draft model " + path_; }
  Status Draft(int32_t seq, std::span<const int32_t> tokens, int n, std::vector<int32_t>* out,
               double* guess_seconds) override;
  bool costly() const override { return true; }
  // The draft's file size over the model's: decoding reads every weight once per token.
  double relative_cost() const override { return relative_cost_; }
  void set_failing_probe(bool on) override { failing_probe_ = on; }
  // Tokens the last Draft computed before its first guess (its catch-up batch).
  int64_t last_catch_up() const { return last_catch_up_; }
  // The most new tokens the catch-up of a failing probe computes (the last ones; see Draft).
  static constexpr size_t kGapContext = 16;

 private:
  ModelDrafter(std::string path, std::unique_ptr<model::Model> m, int threads, int64_t n_ctx);
  std::string path_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<exec::LocalExecutor> exec_;
  std::map<int32_t, std::vector<int32_t>> cached_;  // per sequence, the tokens in the draft's cache
  std::map<int32_t, size_t> seen_;                  // and the most it has held (engine/prefix.h)
  int64_t last_catch_up_ = 0;
  bool failing_probe_ = false;
  double relative_cost_ = 0;
};

// Checks that a draft vocabulary equals the target's (size and every token's text): InvalidArgument
// saying where they differ.
Status CheckSameVocabulary(const tokenizer::Vocab& draft, const tokenizer::Vocab& target,
                           const std::string& draft_path, const std::string& target_path);

// Opens the drafter `options` ask for (nullptr when none).
Result<std::unique_ptr<Drafter>> OpenDrafter(const SpeculationOptions& options, const tokenizer::Vocab& target,
                                             const std::string& target_path);

// A run's compute in seconds: over a pipeline the stages' own (RunOutput::stage_ms, without the
// links), else `seconds`, the run's time. A plain step's, scaled by a draft model's relative_cost,
// is what SpeculationTuner::PredictDraft takes.
double StepCompute(const exec::RunOutput& out, double seconds);

// Chooses the number of guesses per round from measurements (see the header comment).
class SpeculationTuner {
 public:
  SpeculationTuner(int draft_min, int draft_max)
      : min_(std::max(1, draft_min)), max_(draft_max), fixed_(draft_min > 0 && draft_min == draft_max) {}
  // The number of guesses for the next round, at most `limit` (0: a plain step).
  int Choose(int limit, bool costly_drafter);
  // A costly drafter's predicted time per guess until one is measured (the caller's estimate from
  // its size and a plain step's compute; <= 0: none). While a guess is predicted to cost a plain
  // step or more, no round can pay even with every guess accepted, so none is taken to measure it.
  void PredictDraft(double seconds) { predicted_draft_s_ = seconds; }
  // A round's outcome: k guesses, `accepted` of them accepted, the forward took `seconds`;
  // drafting took `draft_seconds` for `drafted` guesses, and `draft_wall_seconds` in all (a draft
  // model's catch-up included: what a probe costs besides its forward).
  void Record(int k, int accepted, double seconds, int drafted, double draft_seconds, double draft_wall_seconds = 0);
  double acceptance() const { return alpha_; }
  // Whether the last Choose was a probe (guesses were not worth a round, tried now and then).
  bool probing() const { return probing_; }

 private:
  int min_, max_;
  bool fixed_;                     // --draft-min == --draft-max: always that many
  double alpha_ = 0.5;             // per-guess acceptance (running mean, then exponential average)
  int64_t examined_ = 0;           // guesses examined so far
  double step_s_ = 0;              // a plain step (0: not measured yet)
  double row_s_ = 0;               // extra per verified row
  bool row_measured_ = false;
  // A forward of k guesses as measured (index k, 0: not yet) and the round it was last measured
  // at: a forward does not grow by the same time per row (the kernels take up to 8 or 16 rows per
  // call), so a length measured in the last kForgetRounds rounds is priced as measured, the others
  // by the step and the time per row (so one slow measurement is retried, not avoided for good).
  static constexpr int kMeasuredLengths = 64, kForgetRounds = 16;
  double forward_s_[kMeasuredLengths + 1] = {};
  int64_t forward_round_[kMeasuredLengths + 1] = {};
  int64_t rounds_ = 0;  // speculated rounds recorded
  bool Measured(int k) const {
    return k <= kMeasuredLengths && forward_s_[k] > 0 && rounds_ - forward_round_[k] <= kForgetRounds;
  }
  double Forward(int k, double row) const { return Measured(k) ? forward_s_[k] : step_s_ + k * row; }
  double draft_s_ = 0;             // per drafted guess
  double predicted_draft_s_ = 0;   // per guess, before draft_s_ is measured
  int skipped_ = 0;                // rounds not speculated since the last probe
  static constexpr int kFirstProbe = 8, kLastProbe = 128;
  int probe_every_ = kFirstProbe;  // rounds between probes while speculation does not pay
  // A probe's cost, at most this share of the plain steps between two probes.
  static constexpr double kProbeBudget = 0.02;
  int budget_steps_ = 0;           // plain steps the last round's cost asks for before a probe
  bool probing_ = false;
};

// Running totals of speculation, for the stats lines and bench.
struct SpeculationStats {
  int64_t rounds = 0;       // forwards with at least one guess
  int64_t guesses = 0;      // guesses verified
  int64_t accepted = 0;     // guesses accepted
  int64_t tokens = 0;       // tokens those rounds produced (accepted + one each)
  // Seconds those rounds spent drafting (a draft model's catch-up included) and in their forwards
  // (0 where not timed per sequence: serve's shared steps).
  double draft_seconds = 0;
  double forward_seconds = 0;
  double acceptance_rate() const { return guesses > 0 ? static_cast<double>(accepted) / guesses : 0; }
  double tokens_per_round() const { return rounds > 0 ? static_cast<double>(tokens) / rounds : 0; }
  // "speculation (prompt lookup): 40 rounds, 3.10 tokens per round, 72% of 180 guesses accepted",
  // then, where timed, "; a round: drafting 0.02 ms, its forward 47.10 ms"
  std::string ToString(const std::string& drafter) const;
};

// The decode loop of one sequence with optional speculation. `committed` holds the sequence's
// tokens whose keys and values are in the cache, in position order; `last` is the token sampled
// after them (not yet in the cache). Step feeds `last`, verifying guesses after it, and returns
// the new sampled tokens: the accepted guesses (now in the cache, after `last`) and one token
// sampled after them (not in the cache). The sequence's sampler must have been configured (by
// the prompt's run). At most `max_new` tokens are returned (>= 1); positions stay below n_ctx.
class Speculator {
 public:
  Speculator(Drafter* drafter, const SpeculationOptions& options)
      : drafter_(drafter), tuner_(options.draft_min, options.draft_max), max_(options.draft_max) {}
  Status Step(exec::Executor& ex, int32_t seq, std::vector<int32_t>* committed, int32_t last, int max_new,
              std::vector<int32_t>* fresh, exec::RunOutput* out);
  const SpeculationStats& stats() const { return stats_; }
  void ResetStats() { stats_ = {}; }
  // The sequence's banned tokens (--ignore-eos): never guessed.
  void set_banned(const std::vector<int32_t>& banned) {
    banned_ = banned;
    if (drafter_ != nullptr) drafter_->set_banned(banned);
  }
  Drafter* drafter() const { return drafter_; }

 private:
  Drafter* drafter_;
  SpeculationTuner tuner_;
  int max_;
  SpeculationStats stats_;
  model::Batch batch_;
  std::vector<int32_t> guesses_, seq_, banned_;
};

}  // namespace tandem::engine
