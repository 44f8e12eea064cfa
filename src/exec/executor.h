// Executor: the whole model's forward pass as the engine sees it, on this machine alone
// (LocalExecutor) or split over workers (Coordinator, dist/coordinator.h).
//
// One Run() takes a batch of tokens of one or more sequences. Before the batch, optional
// truncations drop sequences' KV cells from a position on (every stage applies them in order
// with the batch, so speculative decoding, resumption and a server's cancelled requests can
// rewind). The rows marked in batch.logits produce logits when asked, and when asked the
// executor samples a token from every marked row with that row's sequence's sampler (on the last
// stage: only the token ids travel back). The main node owns the committed tokens of every
// sequence: it configures a sequence's sampler with its history, and the sampler then records
// each token it samples.
//
// Submit() and Collect() split a Run in two, so several batches can be in flight at once: a
// pipeline computes batch i+1 on its first stage while batch i is on the next one. Batches are
// computed in submission order on every stage; outputs can be collected in any order.
//
// Thread safety: one call at a time (Submit and Collect included).
#pragma once

#include <cstdint>
#include <map>
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
  bool sample = false;   // sample a token from every marked row, in row order
  bool logits = false;   // return the logits of every marked row
  std::vector<Truncation> truncate;       // applied first, in order
  std::vector<SequenceSampler> samplers;  // then these sequences' samplers (re)configured
  // Speculative verification (with sample): one entry per marked row, in row order. A row with a
  // guess (>= 0, the token the caller put in the sequence's next row) is verified with
  // Sampler::Verify: accepted, the sampled token is the guess and the sequence's next marked row
  // is looked at; rejected, the sampled token is the correction and the sequence's later marked
  // rows give -1 (not sampled; their cells hold rejected guesses the caller truncates with its
  // next batch). A row with -1 is sampled as usual and ends its sequence's verification. So each
  // sequence gets its accepted guesses plus one token. Empty: every marked row sampled as usual.
  std::vector<int32_t> guesses;
};

struct RunOutput {
  std::vector<int32_t> tokens;     // when sampled: one per marked row, in row order (-1: a row
                                   // after a rejected guess, see RunOptions::guesses)
  int32_t token = -1;              // when sampled: the last of them
  const float* logits = nullptr;   // n_rows x n_vocab, valid until the next Run or Collect
  int64_t n_rows = 0;
  std::vector<double> stage_ms;    // per stage, its compute time for this run, in pipeline order
                                   // (distributed runs; the wire carries it as stage_us)
};

// One stage of an executor: the node that runs it and its layers [layer_begin, layer_end).
struct StageInfo {
  std::string node;  // "main" or "HOST:PORT"
  int64_t layer_begin = 0, layer_end = 0;
  // The plan's prediction per decode step: compute, and the hops into the stage (0: none made).
  double predicted_compute_ms = 0, predicted_link_ms = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Starts computing `batch`; its output comes from Collect(ticket). Errors in the batch or its
  // options are returned here and nothing is in flight for them.
  virtual Result<uint64_t> Submit(const model::Batch& batch, const RunOptions& options) = 0;
  // Waits for a submitted batch's output. Each ticket is collected once.
  virtual Status Collect(uint64_t ticket, RunOutput* out) = 0;
  Status Run(const model::Batch& batch, const RunOptions& options, RunOutput* out) {
    TANDEM_ASSIGN_OR_RETURN(uint64_t t, Submit(batch, options));
    return Collect(t, out);
  }
  // Ok while the executor can run; else why it cannot any more (a pipeline whose worker died).
  // May be called from any thread.
  virtual Status Health() const { return Status::Ok(); }
  // When Health() is not Ok: the node it blames ("HOST:PORT"), if one.
  virtual std::string failed_node() const { return ""; }
  // Between requests (no batch in flight): an executor that lost nodes and went on without them
  // tries them again and, if any is back, uses it from now on (every sequence's cache kept).
  // Errors are about the attempt; the executor stays usable as it was.
  virtual Status Rejoin() { return Status::Ok(); }
  // How many batches in flight keep every stage busy: the number of stages.
  virtual int pipeline_depth() const { return static_cast<int>(stages().size()); }
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
  Result<uint64_t> Submit(const model::Batch& batch, const RunOptions& options) override;
  Status Collect(uint64_t ticket, RunOutput* out) override;
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
  // Outputs computed by Submit and not yet collected (each holds its logits when asked).
  struct Done {
    std::vector<int32_t> tokens;
    std::vector<float> logits;
    int64_t n_rows = 0;
  };
  std::map<uint64_t, Done> done_;
  uint64_t next_ticket_ = 0;
  Done collected_;  // the last collected output (its logits stay valid until the next)
};

}  // namespace tandem::exec
