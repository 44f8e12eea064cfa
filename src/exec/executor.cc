#include "exec/executor.h"

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

int64_t LastMarkedRow(const model::Batch& b) {
  int64_t row = -1, k = 0;
  for (int64_t i = 0; i < b.size(); ++i) {
    if (b.logits[i]) row = k++;
  }
  return row;
}

LocalExecutor::LocalExecutor(const model::Model& model, int64_t n_ctx, int n_threads, int64_t ubatch,
                             const model::ContextOptions& context)
    : model_(model), n_ctx_(n_ctx), ubatch_(std::max<int64_t>(1, ubatch)),
      ctx_(model, n_ctx, n_threads, context) {}

Status LocalExecutor::Clear() {
  ctx_.cache().Clear();
  samplers_.Clear();
  return Status::Ok();
}

Status LocalExecutor::Run(const model::Batch& b, const RunOptions& o, RunOutput* out) {
  if (o.truncate_seq >= 0) ctx_.cache().Truncate(o.truncate_seq, o.truncate_from);
  const int64_t row = LastMarkedRow(b);
  if ((o.sample || o.logits) && row < 0) {
    return Status::InvalidArgument("a result was asked for but no row is marked for logits");
  }
  if (o.sampler) {
    int32_t seq = b.seq.empty() ? 0 : b.seq.back();
    for (int64_t i = 0; i < b.size(); ++i) if (b.logits[i]) seq = b.seq[i];
    TANDEM_RETURN_IF_ERROR(samplers_.Configure(seq, *o.sampler, o.history));
  }
  const int64_t n_vocab = model_.params().n_vocab;
  out->token = -1;
  if (b.size() <= ubatch_) {
    TANDEM_RETURN_IF_ERROR(ctx_.Decode(b));
    out->logits = ctx_.logits();
    out->n_rows = ctx_.n_logits();
  } else {
    // Micro-batches; the logits of all of them gathered in order.
    logits_.clear();
    for (int64_t i = 0; i < b.size(); i += ubatch_) {
      sub_.Clear();
      for (int64_t j = i; j < std::min(b.size(), i + ubatch_); ++j) {
        sub_.Add(b.tokens[j], b.pos[j], b.seq[j], b.logits[j] != 0);
      }
      TANDEM_RETURN_IF_ERROR(ctx_.Decode(sub_));
      logits_.insert(logits_.end(), ctx_.logits(), ctx_.logits() + ctx_.n_logits() * n_vocab);
    }
    out->logits = logits_.data();
    out->n_rows = static_cast<int64_t>(logits_.size()) / n_vocab;
  }
  if (o.sample) {
    int32_t seq = 0;
    for (int64_t i = 0; i < b.size(); ++i) if (b.logits[i]) seq = b.seq[i];
    TANDEM_ASSIGN_OR_RETURN(out->token, samplers_.SampleAndAccept(
        seq, {out->logits + row * n_vocab, static_cast<size_t>(n_vocab)}));
  }
  return Status::Ok();
}

}  // namespace tandem::exec
