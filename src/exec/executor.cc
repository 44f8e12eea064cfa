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

Result<uint64_t> LocalExecutor::Submit(const model::Batch& b, const RunOptions& o) {
  int64_t marked = 0;
  for (uint8_t l : b.logits) marked += l ? 1 : 0;
  if ((o.sample || o.logits) && marked == 0) {
    return Status::InvalidArgument("a result was asked for but no row is marked for logits");
  }
  if (!o.guesses.empty() && (!o.sample || static_cast<int64_t>(o.guesses.size()) != marked)) {
    return Status::InvalidArgument("guesses need sampling and one guess per row marked for logits");
  }
  StageStep step;
  step.truncate = &o.truncate;
  step.samplers = &o.samplers;
  const int64_t n_vocab = model_.params().n_vocab;
  const bool split = b.size() > ubatch_;
  logits_.clear();
  TANDEM_RETURN_IF_ERROR(ForEachMicroBatch(b, ubatch_, &sub_, [&](const model::Batch& sub, int64_t i, int64_t) {
    TANDEM_RETURN_IF_ERROR(stage_.Forward(sub, nullptr, i == 0 ? step : StageStep{}));
    // Several micro-batches: the logits of all of them gathered in order.
    if (split) logits_.insert(logits_.end(), stage_.logits(), stage_.logits() + stage_.n_logits() * n_vocab);
    return Status::Ok();
  }));
  const float* logits = split ? logits_.data() : stage_.logits();
  Done d;
  d.n_rows = split ? static_cast<int64_t>(logits_.size()) / n_vocab : stage_.n_logits();
  if (o.sample) TANDEM_RETURN_IF_ERROR(stage_.SampleRows(b, logits, &d.tokens, o.guesses));
  if (o.logits) d.logits.assign(logits, logits + d.n_rows * n_vocab);
  const uint64_t ticket = ++next_ticket_;
  done_.emplace(ticket, std::move(d));
  return ticket;
}

Status LocalExecutor::Collect(uint64_t ticket, RunOutput* out) {
  auto it = done_.find(ticket);
  if (it == done_.end()) return Status::InvalidArgument("no batch in flight with ticket " + std::to_string(ticket));
  collected_ = std::move(it->second);
  done_.erase(it);
  out->tokens = collected_.tokens;
  out->token = -1;
  for (int32_t t : collected_.tokens) {
    if (t >= 0) out->token = t;
  }
  out->logits = collected_.logits.empty() ? nullptr : collected_.logits.data();
  out->n_rows = collected_.logits.empty() ? 0 : collected_.n_rows;
  out->stage_ms.clear();
  return Status::Ok();
}

}  // namespace tandem::exec
