#include "exec/stage.h"

#include <algorithm>

namespace tandem::exec {

Status SamplerSet::Configure(int32_t seq, const sampling::SamplerParams& p,
                             const std::vector<int32_t>& history) {
  TANDEM_ASSIGN_OR_RETURN(sampling::Sampler s, sampling::Sampler::Create(p));
  for (int32_t t : history) s.Accept(t);
  samplers_.insert_or_assign(seq, std::move(s));
  return Status::Ok();
}

Result<int32_t> SamplerSet::SampleAndAccept(int32_t seq, std::span<const float> logits) {
  auto it = samplers_.find(seq);
  if (it == samplers_.end()) {
    return Status::InvalidArgument("sequence " + std::to_string(seq) + " has no sampler configured");
  }
  TANDEM_ASSIGN_OR_RETURN(int32_t t, it->second.Sample(logits));
  it->second.Accept(t);
  return t;
}

Result<sampling::Sampler::Verdict> SamplerSet::VerifyAndAccept(int32_t seq, std::span<const float> logits,
                                                                int32_t guess) {
  auto it = samplers_.find(seq);
  if (it == samplers_.end()) {
    return Status::InvalidArgument("sequence " + std::to_string(seq) + " has no sampler configured");
  }
  TANDEM_ASSIGN_OR_RETURN(sampling::Sampler::Verdict v, it->second.Verify(logits, guess));
  it->second.Accept(v.token);
  return v;
}

int64_t AutoMicroBatch(int64_t n_tokens, int n_stages) {
  constexpr int64_t kMax = 512, kMin = 32, kGroup = 8;
  if (n_stages <= 1) return kMax;
  const int64_t u = n_tokens / (8 * static_cast<int64_t>(n_stages)) / kGroup * kGroup;
  return std::clamp(u, kMin, kMax);
}

Status ForEachMicroBatch(const model::Batch& b, int64_t ubatch, model::Batch* sub,
                         const std::function<Status(const model::Batch&, int64_t, int64_t)>& fn) {
  ubatch = std::max<int64_t>(1, ubatch);
  const bool has_tokens = !b.tokens.empty();
  for (int64_t i = 0; i < b.size(); i += ubatch) {
    const int64_t e = std::min(b.size(), i + ubatch);
    sub->Clear();
    for (int64_t j = i; j < e; ++j) {
      sub->Add(has_tokens ? b.tokens[j] : 0, b.pos[j], b.seq[j], b.logits[j] != 0);
    }
    if (!has_tokens) sub->tokens.clear();
    TANDEM_RETURN_IF_ERROR(fn(*sub, i, e));
  }
  return Status::Ok();
}

Stage::Stage(const model::Model& model, int64_t n_ctx, int threads, int64_t layer_begin,
             int64_t layer_end, const model::ContextOptions& options)
    : model_(model), ctx_(model, n_ctx, threads, layer_begin, layer_end, options) {}

Status Stage::ApplyStep(const StageStep& step) {
  if (step.clear_all) Clear();
  if (step.truncate != nullptr) {
    for (const Truncation& t : *step.truncate) ctx_.cache().Truncate(t.seq, t.from);
  }
  if (step.samplers != nullptr && is_last()) {
    // Token ids from the wire size the sampler's tables: each must be in the vocabulary.
    const int64_t n_vocab = model_.params().n_vocab;
    for (const SequenceSampler& s : *step.samplers) {
      for (const std::vector<int32_t>* ids : {&s.history, &s.params.banned}) {
        for (int32_t t : *ids) {
          if (t < 0 || t >= n_vocab) {
            return Status::InvalidArgument("sampler: token id " + std::to_string(t) +
                                           " is outside the vocabulary of " + std::to_string(n_vocab));
          }
        }
      }
      TANDEM_RETURN_IF_ERROR(samplers_.Configure(s.seq, s.params, s.history));
    }
  }
  return Status::Ok();
}

Status Stage::Forward(const model::Batch& batch, const float* hidden_in, const StageStep& step) {
  TANDEM_RETURN_IF_ERROR(ApplyStep(step));
  return ctx_.Forward(batch, hidden_in);
}

Status Stage::Sample(const model::Batch& batch, std::vector<int32_t>* tokens, std::span<const int32_t> guesses) {
  if (!is_last()) return Status::InvalidArgument("only the last stage samples");
  int64_t marked = 0;
  for (uint8_t l : batch.logits) marked += l ? 1 : 0;
  if (marked == 0 || marked != ctx_.n_logits()) {
    return Status::InvalidArgument("no logits to sample from (no row marked, or another batch's logits)");
  }
  return SampleRows(batch, ctx_.logits(), tokens, guesses);
}

Status Stage::SampleRows(const model::Batch& batch, const float* logits, std::vector<int32_t>* tokens,
                         std::span<const int32_t> guesses) {
  const size_t n_vocab = static_cast<size_t>(model_.params().n_vocab);
  int64_t marked = 0;
  for (uint8_t l : batch.logits) marked += l ? 1 : 0;
  if (!guesses.empty()) {
    if (static_cast<int64_t>(guesses.size()) != marked) {
      return Status::InvalidArgument(std::to_string(guesses.size()) + " guesses for " + std::to_string(marked) +
                                     " rows marked for logits");
    }
    for (int32_t g : guesses) {
      if (g < -1 || g >= static_cast<int64_t>(n_vocab)) {
        return Status::InvalidArgument("guessed token id " + std::to_string(g) + " is outside the vocabulary of " +
                                       std::to_string(n_vocab));
      }
    }
  }
  std::vector<int32_t> done;  // sequences whose verification ended in this batch
  int64_t row = 0;
  for (int64_t i = 0; i < batch.size(); ++i) {
    if (!batch.logits[i]) continue;
    const std::span<const float> l(logits + row * n_vocab, n_vocab);
    const int32_t seq = batch.seq[i];
    const int32_t guess = guesses.empty() ? -1 : guesses[row];
    ++row;
    if (guesses.empty()) {
      TANDEM_ASSIGN_OR_RETURN(int32_t t, samplers_.SampleAndAccept(seq, l));
      tokens->push_back(t);
      continue;
    }
    if (std::find(done.begin(), done.end(), seq) != done.end()) {
      tokens->push_back(-1);
      continue;
    }
    if (guess < 0) {
      TANDEM_ASSIGN_OR_RETURN(int32_t t, samplers_.SampleAndAccept(seq, l));
      tokens->push_back(t);
      done.push_back(seq);
      continue;
    }
    TANDEM_ASSIGN_OR_RETURN(sampling::Sampler::Verdict v, samplers_.VerifyAndAccept(seq, l, guess));
    tokens->push_back(v.token);
    if (!v.accepted) done.push_back(seq);
  }
  return Status::Ok();
}

void Stage::Clear() {
  ctx_.cache().Clear();
  samplers_.Clear();
}

}  // namespace tandem::exec
