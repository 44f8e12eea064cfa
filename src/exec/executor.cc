#include "exec/executor.h"

#include <algorithm>

namespace tandem::exec {

LocalExecutor::LocalExecutor(const model::Model& model, int64_t n_ctx, int n_threads, int64_t ubatch,
                             const model::ContextOptions& context)
    : model_(model), n_ctx_(n_ctx), ubatch_(ubatch > 0 ? ubatch : AutoMicroBatch(0, 1)),
      stage_(model, n_ctx, n_threads, 0, -1, context) {}

Status LocalExecutor::Clear() {
  stage_.Clear();
  return Status::Ok();
}

Status LocalExecutor::Run(const model::Batch& b, const RunOptions& o, RunOutput* out) {
  const int64_t row = LastMarkedRow(b);
  if ((o.sample || o.logits) && row < 0) {
    return Status::InvalidArgument("a result was asked for but no row is marked for logits");
  }
  StageStep step;
  step.truncate_seq = o.truncate_seq;
  step.truncate_from = o.truncate_from;
  if (o.sampler) {
    step.sampler = &*o.sampler;
    step.history = &o.history;
  }
  const int64_t n_vocab = model_.params().n_vocab;
  const bool split = b.size() > ubatch_;
  out->token = -1;
  logits_.clear();
  TANDEM_RETURN_IF_ERROR(ForEachMicroBatch(b, ubatch_, &sub_, [&](const model::Batch& sub, int64_t i, int64_t) {
    TANDEM_RETURN_IF_ERROR(stage_.Forward(sub, nullptr, i == 0 ? step : StageStep{}));
    // Several micro-batches: the logits of all of them gathered in order.
    if (split) logits_.insert(logits_.end(), stage_.logits(), stage_.logits() + stage_.n_logits() * n_vocab);
    return Status::Ok();
  }));
  if (split) {
    out->logits = logits_.data();
    out->n_rows = static_cast<int64_t>(logits_.size()) / n_vocab;
  } else {
    out->logits = stage_.logits();
    out->n_rows = stage_.n_logits();
  }
  if (o.sample) {
    TANDEM_ASSIGN_OR_RETURN(out->token, stage_.SampleRow(ResultSequence(b), {out->logits + row * n_vocab,
                                                                            static_cast<size_t>(n_vocab)}));
  }
  return Status::Ok();
}

}  // namespace tandem::exec
