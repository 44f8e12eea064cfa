// ForwardingExecutor: an Executor that passes every call to another one. A decorator (a test's
// executor that can be made to fail or to wait) derives from it and overrides only what it
// changes.
//
// Thread safety: as the inner executor's.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/executor.h"

namespace tandem::exec {

class ForwardingExecutor : public Executor {
 public:
  explicit ForwardingExecutor(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {}
  Result<uint64_t> Submit(const model::Batch& b, const RunOptions& o) override { return inner_->Submit(b, o); }
  Status Collect(uint64_t ticket, RunOutput* out) override { return inner_->Collect(ticket, out); }
  Status Health() const override { return inner_->Health(); }
  std::string failed_node() const override { return inner_->failed_node(); }
  Status Rejoin() override { return inner_->Rejoin(); }
  int pipeline_depth() const override { return inner_->pipeline_depth(); }
  Status Clear() override { return inner_->Clear(); }
  int64_t n_ctx() const override { return inner_->n_ctx(); }
  const model::ModelParams& params() const override { return inner_->params(); }
  std::vector<StageInfo> stages() const override { return inner_->stages(); }

 protected:
  Executor& inner() { return *inner_; }

 private:
  std::unique_ptr<Executor> inner_;
};

}  // namespace tandem::exec
