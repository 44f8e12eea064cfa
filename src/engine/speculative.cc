#include "engine/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>

#include "engine/prefix.h"

namespace tandem::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }


}  // namespace

// ---- prompt lookup ----

Status LookupDrafter::Draft(int32_t, std::span<const int32_t> tokens, int n, std::vector<int32_t>* out,
                            double* guess_seconds) {
  *guess_seconds = 0;
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (n <= 0) return Status::Ok();
  for (int64_t g = std::min<int64_t>(ngram_max_, len - 1); g >= std::max(1, ngram_min_); --g) {
    const int32_t* suffix = tokens.data() + len - g;
    // The latest earlier occurrence of the suffix. The guesses copy what followed it, and go on
    // copying into the guesses themselves when they reach the end (a loop of period len - s - g
    // is guessed for as long as asked).
    for (int64_t s = len - g - 1; s >= 0; --s) {
      if (!std::equal(suffix, suffix + g, tokens.data() + s)) continue;
      const size_t first = out->size();
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = s + g + i;
        out->push_back(at < len ? tokens[at] : (*out)[first + (at - len)]);
      }
      return Status::Ok();
    }
  }
  return Status::Ok();
}

// ---- draft model ----

Status CheckSameVocabulary(const tokenizer::Vocab& draft, const tokenizer::Vocab& target,
                           const std::string& draft_path, const std::string& target_path) {
  auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument("draft model " + draft_path + ": " + why + "; a draft model must have the vocabulary of " +
                                   target_path);
  };
  if (draft.size() != target.size()) {
    return refuse("its vocabulary has " + std::to_string(draft.size()) + " tokens, the model's " +
                  std::to_string(target.size()));
  }
  for (size_t i = 0; i < draft.size(); ++i) {
    const auto id = static_cast<tokenizer::TokenId>(i);
    if (draft.token(id).text != target.token(id).text) {
      return refuse("token " + std::to_string(i) + " is \"" + draft.token(id).text + "\" there and \"" +
                    target.token(id).text + "\" in the model");
    }
  }
  return Status::Ok();
}

ModelDrafter::ModelDrafter(std::string path, std::unique_ptr<model::Model> m, int threads, int64_t n_ctx)
    : path_(std::move(path)), model_(std::move(m)) {
  exec_ = std::make_unique<exec::LocalExecutor>(*model_, std::min(n_ctx, model_->params().n_ctx_train), threads);
}

Result<std::unique_ptr<ModelDrafter>> ModelDrafter::Open(const std::string& path, const tokenizer::Vocab& target,
                                                         const std::string& target_path, int threads,
                                                         int64_t n_ctx) {
  Result<model::Model> m = model::Model::Load(path);
  if (!m.ok()) return m.status().WithContext("draft model " + path);
  Result<tokenizer::Vocab> v = tokenizer::Vocab::FromGguf(m->file());
  if (!v.ok()) return v.status().WithContext("draft model " + path);
  TANDEM_RETURN_IF_ERROR(CheckSameVocabulary(*v, target, path, target_path));
  if (m->params().n_vocab != static_cast<int64_t>(target.size())) {
    return Status::InvalidArgument("draft model " + path + ": its output has " + std::to_string(m->params().n_vocab) +
                                   " logits for a vocabulary of " + std::to_string(target.size()));
  }
  auto mp = std::make_unique<model::Model>(std::move(m).value());
  TANDEM_RETURN_IF_ERROR(mp->CopyIntoMemory(0, mp->params().n_layer, true));
  std::unique_ptr<ModelDrafter> d(new ModelDrafter(path, std::move(mp), threads, n_ctx));
  std::error_code e1, e2;
  const auto draft_bytes = std::filesystem::file_size(path, e1), target_bytes = std::filesystem::file_size(target_path, e2);
  if (!e1 && !e2 && target_bytes > 0) d->relative_cost_ = static_cast<double>(draft_bytes) / static_cast<double>(target_bytes);
  return d;
}

// The draft's greedy pick, skipping banned tokens (the first of equal logits, as the sampler's).
static int32_t Pick(const float* x, int64_t n, const std::vector<int32_t>& banned) {
  int32_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if ((best < 0 || x[i] > x[best]) && std::find(banned.begin(), banned.end(), i) == banned.end()) {
      best = static_cast<int32_t>(i);
    }
  }
  return best < 0 ? 0 : best;
}

Status ModelDrafter::Draft(int32_t seq, std::span<const int32_t> tokens, int n, std::vector<int32_t>* out,
                           double* guess_seconds) {
  *guess_seconds = 0;
  const int64_t len = static_cast<int64_t>(tokens.size());
  n = static_cast<int>(std::min<int64_t>(n, exec_->n_ctx() - len - 1));
  if (n <= 0 || len == 0) return Status::Ok();
  const int64_t n_vocab = model_->params().n_vocab;
  // Catch up: the draft's cache keeps the longest prefix it shares with `tokens`; the rest is
  // computed in one batch (at least the last token, whose logits give the first guess).
  std::vector<int32_t>& cached = cached_[seq];
  const size_t common =
      ReusablePrefix(model_->params(), cached, std::vector<int32_t>(tokens.begin(), tokens.end()), &seen_[seq]);
  // A probe of failing guesses, after rounds without any, computes only the last kGapContext new
  // tokens, at their positions: it then costs the same however long the gap (catching up on all
  // of it cost as much per token as drafting along: a 2-layer draft of a 22-layer model, 2.7 % of
  // every skipped step), and its guesses, from a shorter context, are verified like any. A first
  // call computes the whole prompt; a draft whose guesses pass is never cut short.
  size_t from = common;
  if (failing_probe_ && common > 0 && tokens.size() - common > kGapContext) from = tokens.size() - kGapContext;
  model::Batch b;
  for (size_t j = from; j < tokens.size(); ++j) b.Add(tokens[j], static_cast<int32_t>(j), seq, j + 1 == tokens.size());
  last_catch_up_ = b.size();
  exec::RunOptions o;
  o.logits = true;
  o.truncate.push_back({seq, static_cast<int32_t>(common)});
  exec::RunOutput r;
  cached.clear();  // unknown until the runs succeed (the next call then recomputes all)
  const bool one = b.size() == 1;
  auto t0 = Clock::now();
  TANDEM_RETURN_IF_ERROR(exec_->Run(b, o, &r));
  if (!one) t0 = Clock::now();  // a catch-up batch is not a guess's cost
  std::vector<int32_t> now(tokens.begin(), tokens.end());
  int32_t g = Pick(r.logits, n_vocab, banned_);
  out->push_back(g);
  exec::RunOptions step;  // (the catch-up dropped every cell after `common`)
  step.logits = true;
  for (int i = 1; i < n; ++i) {
    b.Clear();
    b.Add(g, static_cast<int32_t>(now.size()), seq, true);
    TANDEM_RETURN_IF_ERROR(exec_->Run(b, step, &r));
    now.push_back(g);
    g = Pick(r.logits, n_vocab, banned_);
    out->push_back(g);
  }
  cached = std::move(now);
  // Per guess times n; not measured (-1) when the catch-up batch made the only guess.
  *guess_seconds = one || n > 1 ? Since(t0) * n / (one ? n : n - 1) : -1;
  return Status::Ok();
}

Result<std::unique_ptr<Drafter>> OpenDrafter(const SpeculationOptions& o, const tokenizer::Vocab& target,
                                             const std::string& target_path) {
  if (o.lookup && !o.draft_model.empty()) {
    return Status::InvalidArgument("--lookup and --model-draft are two drafters: choose one");
  }
  if (o.draft_max < 1 || o.draft_min < 0 || o.draft_min > o.draft_max) {
    return Status::InvalidArgument("--draft-max must be at least 1 and --draft-min between 0 and --draft-max (" +
                                   std::to_string(o.draft_min) + ", " + std::to_string(o.draft_max) + ")");
  }
  if (o.lookup) return std::unique_ptr<Drafter>(new LookupDrafter(o.lookup_ngram_max, o.lookup_ngram_min));
  if (!o.draft_model.empty()) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<ModelDrafter> d,
                            ModelDrafter::Open(o.draft_model, target, target_path, o.threads, o.n_ctx));
    return std::unique_ptr<Drafter>(std::move(d));
  }
  return std::unique_ptr<Drafter>();
}

// ---- tuning ----

double StepCompute(const exec::RunOutput& out, double seconds) {
  if (out.stage_ms.empty()) return seconds;
  double compute = 0;
  for (double ms : out.stage_ms) compute += ms / 1000;
  return compute;
}

int SpeculationTuner::Choose(int limit, bool costly_drafter) {
  const int hi = std::min(max_, limit);
  if (fixed_) return hi >= min_ ? hi : 0;
  if (hi < min_ || step_s_ <= 0) return 0;  // the first round measures a plain step
  const double row = row_measured_ ? row_s_ : 0.1 * step_s_;
  // A drafter that costs compute: two guesses until its cost is measured (a draft model's first
  // guess may come out of its catch-up batch, untimed; the second is a forward of its own),
  // unless its predicted cost already rules every round out.
  if (costly_drafter && draft_s_ <= 0) {
    if (predicted_draft_s_ > 0 && predicted_draft_s_ + row >= step_s_) return 0;
    return std::max(min_, std::min(2, hi));
  }
  const double draft = costly_drafter ? draft_s_ : 0.0;
  double best_rate = 1.0 / step_s_;
  int best = 0;
  double expected = 1, term = 1;
  for (int k = 1; k <= hi; ++k) {
    term *= alpha_;
    expected += term;
    const double rate = expected / (Forward(k, row) + k * draft);
    if (k >= min_ && rate > best_rate) best_rate = rate, best = k;
  }
  probing_ = false;
  if (best > 0) {
    skipped_ = 0;
    probe_every_ = kFirstProbe;
    return best;
  }
  // Not worth it now; a probe now and then (less and less often while probes fail, and no more
  // often than its cost allows) keeps the acceptance rate current.
  if (++skipped_ < std::max(probe_every_, budget_steps_)) return 0;
  skipped_ = 0;
  probe_every_ = std::min(2 * probe_every_, kLastProbe);
  probing_ = true;
  return min_;
}

void SpeculationTuner::Record(int k, int accepted, double seconds, int drafted, double draft_seconds,
                              double draft_wall_seconds) {
  constexpr double kW = 0.2;  // weight of a new measurement
  if (k > 0 && step_s_ > 0) {
    // What the round cost beyond the plain steps it saved: the next probe waits for enough plain
    // steps that it stays within kProbeBudget of them.
    const double extra = std::max(0.0, draft_wall_seconds) + seconds - (1 + accepted) * step_s_;
    budget_steps_ = extra > 0 ? static_cast<int>(std::ceil(extra / (kProbeBudget * step_s_))) : 0;
  }
  if (k == 0) {
    step_s_ = step_s_ <= 0 ? seconds : (1 - kW) * step_s_ + kW * seconds;
  } else {
    // The running mean of the first guesses (the prior 0.5 weighing as two), then an exponential
    // average: failing guesses stop speculation after 2-3 rounds rather than 6 or more.
    const int examined = std::min(accepted + 1, k);
    for (int i = 0; i < examined; ++i, ++examined_) {
      const double w = std::max(0.1, 1.0 / (examined_ + 3));
      alpha_ += w * ((i < accepted ? 1.0 : 0.0) - alpha_);
    }
    ++rounds_;
    if (k <= kMeasuredLengths) {
      forward_s_[k] = Measured(k) ? (1 - kW) * forward_s_[k] + kW * seconds : seconds;
      forward_round_[k] = rounds_;
    }
    if (step_s_ > 0) {
      const double r = std::max(0.0, (seconds - step_s_) / k);
      row_s_ = row_measured_ ? (1 - kW) * row_s_ + kW * r : r;
      row_measured_ = true;
    }
  }
  if (drafted > 0) {
    const double per = draft_seconds / drafted;
    draft_s_ = draft_s_ <= 0 ? per : (1 - kW) * draft_s_ + kW * per;
  }
}

std::string SpeculationStats::ToString(const std::string& drafter) const {
  char line[256];
  std::snprintf(line, sizeof line, "speculation (%s): %lld rounds, %.2f tokens per round, %.0f%% of %lld guesses accepted",
                drafter.c_str(), static_cast<long long>(rounds), tokens_per_round(), 100 * acceptance_rate(),
                static_cast<long long>(guesses));
  std::string text = line;
  if (rounds > 0 && forward_seconds > 0) {
    std::snprintf(line, sizeof line, "; a round: drafting %.2f ms, its forward %.2f ms", 1e3 * draft_seconds / rounds,
                  1e3 * forward_seconds / rounds);
    text += line;
  }
  return text;
}

// ---- one step ----

Status Speculator::Step(exec::Executor& ex, int32_t seq, std::vector<int32_t>* committed, int32_t last, int max_new,
                        std::vector<int32_t>* fresh, exec::RunOutput* out) {
  fresh->clear();
  const int64_t pos = static_cast<int64_t>(committed->size());
  // Guesses take positions pos + 1 .. pos + k, all below n_ctx - 1 as a plain step's would be.
  const int limit = static_cast<int>(std::min<int64_t>({max_new - 1, ex.n_ctx() - 2 - pos, max_}));
  guesses_.clear();
  int drafted = 0;
  double draft_s = 0, draft_wall = 0;
  if (drafter_ != nullptr && limit > 0) {
    const int want = tuner_.Choose(limit, drafter_->costly());
    if (want > 0) {
      drafter_->set_failing_probe(tuner_.probing() && tuner_.acceptance() < 0.5);
      seq_.assign(committed->begin(), committed->end());
      seq_.push_back(last);
      const auto d0 = Clock::now();
      TANDEM_RETURN_IF_ERROR(drafter_->Draft(seq, seq_, want, &guesses_, &draft_s));
      draft_wall = Since(d0);
      if (static_cast<int>(guesses_.size()) > want) guesses_.resize(want);
      // A banned token would be rejected: the guesses stop before one.
      for (size_t i = 0; i < guesses_.size(); ++i) {
        if (std::find(banned_.begin(), banned_.end(), guesses_[i]) != banned_.end()) {
          guesses_.resize(i);
          break;
        }
      }
      drafted = drafter_->costly() && draft_s >= 0 ? static_cast<int>(guesses_.size()) : 0;
    }
  }
  const int k = static_cast<int>(guesses_.size());
  batch_.Clear();
  batch_.Add(last, static_cast<int32_t>(pos), seq, true);
  for (int i = 0; i < k; ++i) batch_.Add(guesses_[i], static_cast<int32_t>(pos + 1 + i), seq, true);
  exec::RunOptions o;
  o.sample = true;
  // Rejected guesses of the previous round may sit in the cache from pos on.
  if (drafter_ != nullptr) o.truncate.push_back({seq, static_cast<int32_t>(pos)});
  if (k > 0) {
    o.guesses = guesses_;
    o.guesses.push_back(-1);
  }
  const auto t0 = Clock::now();
  TANDEM_RETURN_IF_ERROR(ex.Run(batch_, o, out));
  const double seconds = Since(t0);
  if (static_cast<int>(out->tokens.size()) != k + 1) {
    return Status::Internal("a verification of " + std::to_string(k) + " guesses returned " +
                            std::to_string(out->tokens.size()) + " tokens");
  }
  committed->push_back(last);
  int accepted = 0;
  while (accepted < k && out->tokens[accepted] == guesses_[accepted]) {
    fresh->push_back(guesses_[accepted]);
    committed->push_back(guesses_[accepted]);
    ++accepted;
  }
  if (out->tokens[accepted] < 0) return Status::Internal("the verification returned no token after the accepted guesses");
  fresh->push_back(out->tokens[accepted]);
  if (drafter_ != nullptr && k == 0 && drafter_->relative_cost() > 0) {
    // A plain step's compute scaled to the draft's size: what a guess will cost on this node,
    // roughly, until one is timed.
    tuner_.PredictDraft(drafter_->relative_cost() * StepCompute(*out, seconds));
  }
  if (drafter_ != nullptr) tuner_.Record(k, accepted, seconds, drafted, draft_s, draft_wall);
  if (k > 0) {
    ++stats_.rounds;
    stats_.guesses += k;
    stats_.accepted += accepted;
    stats_.tokens += accepted + 1;
    stats_.draft_seconds += draft_wall;
    stats_.forward_seconds += seconds;
  }
  return Status::Ok();
}

}  // namespace tandem::engine
