// Executor: the whole model's forward pass as the engine sees it, on this machine alone
// (LocalExecutor) or split over workers (Coordinator, dist/coordinator.h).
//
// One Run() takes a batch of tokens of one or more sequences. Before the batch, an optional
// truncation drops a sequence's KV cells from a position on (every stage applies it in order
// with the batch, so speculative decoding and resumption can rewind). The rows marked in
// batch.logits produce logits when asked, and when asked the executor samples the next token
// from the last marked row with that sequence's sampler (on the last stage: only the token id
// travels back). The main node owns the committed tokens of every sequence: it configures a
// sequence's sampler with its history, and the sampler then records each token it samples.
//
// Thread safety: one Run() at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/stage.h"
#include "model/forward.h"
#include "sampling/sampler.h"

namespace tandem::exec {

struct RunOptions {
  bool sample = false;   // sample a token from the last marked row
  bool logits = false;   // return the logits of every marked row
  int32_t truncate_seq = -1, truncate_from = 0;  // applied first (seq -1: none)
  // When set: (re)configure the sampler of the sequence of the batch's last marked row, with
  // these parameters and the sequence's tokens so far.
  std::optional<sampling::SamplerParams> sampler;
  std::vector<int32_t> history;
};


struct RunOutput {
  int32_t token = -1;              // when sampled
  const float* logits = nullptr;   // n_rows x n_vocab, valid until the next Run
  int64_t n_rows = 0;
  std::vector<double> stage_ms;    // per stage, its compute time for this run, in pipeline order
                                   // (distributed runs; the wire carries it as stage_us)
};

// One stage of an executor: the node that runs it and its layers [layer_begin, layer_end).
struct StageInfo {
  std::string node;  // "main" or "HOST:PORT"
  int64_t layer_begin = 0, layer_end = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual Status Run(const model::Batch& batch, const RunOptions& options, RunOutput* out) = 0;
  // Drops every sequence from the KV caches.
  virtual Status Clear() = 0;
  virtual int64_t n_ctx() const = 0;
  virtual const model::ModelParams& params() const = 0;
  // The stages in pipeline order (one for a single node).
  virtual std::vector<StageInfo> stages() const = 0;
};

// The whole model on this machine.
class LocalExecutor : public Executor {
 public:
  // Batches larger than `ubatch` run as consecutive micro-batches, as a pipeline runs them
  // (0: AutoMicroBatch for one stage).
  LocalExecutor(const model::Model& model, int64_t n_ctx, int n_threads, int64_t ubatch = 0,
                const model::ContextOptions& context = {});
  Status Run(const model::Batch& batch, const RunOptions& options, RunOutput* out) override;
  Status Clear() override;
  int64_t n_ctx() const override { return n_ctx_; }
  const model::ModelParams& params() const override { return model_.params(); }
  std::vector<StageInfo> stages() const override { return {{"main", 0, model_.params().n_layer}}; }
  model::Context& context() { return stage_.context(); }

 private:
  const model::Model& model_;
  int64_t n_ctx_, ubatch_;
  Stage stage_;  // every layer: the first stage and the last
  model::Batch sub_;
  std::vector<float> logits_;
};

}  // namespace tandem::exec
