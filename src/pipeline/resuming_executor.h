// ResumingExecutor: a pipeline that keeps going when a node dies.
//
// It wraps the running pipeline (a Coordinator) and keeps what only the main node can keep: for
// every sequence, the token at each position of its KV cache, and where its sampler stands
// (parameters, the tokens it has seen, the random draws it has made). Both follow from the
// batches and their outputs, in submission order, so callers (engine::Engine, the server's
// Scheduler) need not know about failures at all.
//
// When the pipeline fails (a worker dies, a link breaks or goes silent), the next Submit or
// Collect:
//   1. asks every worker whether it is up (a short authenticated probe: a worker that lost only
//      its link answers and stays in) and writes one line naming the lost nodes and the reason;
//   2. opens a new pipeline over the workers still up plus the standby workers (re-planned over
//      them; each loads its layers from its copy, cache or stream, as at start; with no worker
//      left, the whole model on this machine);
//   3. re-computes every sequence's cache by submitting again, pipelined and without results,
//      the batches that built it, in the shapes they had (the same shapes give the same cache to
//      the bit whatever the kernels; since they became batch-invariant, other shapes would too),
//      then re-configures each sampler where it stood, its random sequence included;
//   4. submits again, in order, every batch that was in flight;
// and writes a line with the new plan and the time each part took. The caller's Collect then
// returns what the lost pipeline would have: greedy and seeded output are those of a run with no
// failure. A node that fails while resuming is dropped too, and resumption goes on over the rest.
// If the nodes left cannot hold the model, the error says so and names the lost nodes; the
// executor stays failed (Health) until it is rebuilt.
//
// Between requests, Rejoin() asks the lost workers (at most once a second) whether they are back
// and, if any is, moves the sequences onto a pipeline over the original workers again.
//
// Thread safety: as exec::Executor (one call at a time); Health(), failed_node() and stages()
// from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/executor.h"

namespace tandem::pipeline {

// Opens a pipeline over `workers` (in order; empty: this machine alone). `quiet`: no progress
// lines (a resumption prints its own).
using PipelineOpener =
    std::function<Result<std::unique_ptr<exec::Executor>>(const std::vector<std::string>& workers, bool quiet)>;
// Whether a worker answers and is free to serve a session now (a short authenticated probe).
using WorkerProbe = std::function<Status(const std::string& worker)>;

struct ResumeOptions {
  std::vector<std::string> workers;  // the pipeline's workers, in order
  std::vector<std::string> standby;  // joined after a failure, after the survivors
  std::function<void(const std::string&)> log;  // default: stderr
  // How long a surviving worker may stay busy with the session that failed before it is
  // dropped (it frees the session once the old pipeline's connections close).
  int busy_wait_ms = 3000;
};

class ResumingExecutor : public exec::Executor {
 public:
  // `first` is the running pipeline over options.workers.
  ResumingExecutor(std::unique_ptr<exec::Executor> first, ResumeOptions options, PipelineOpener open,
                   WorkerProbe probe);
  ~ResumingExecutor() override;

  Result<uint64_t> Submit(const model::Batch& batch, const exec::RunOptions& options) override;
  Status Collect(uint64_t ticket, exec::RunOutput* out) override;
  // Ok while this executor can run (a failed pipeline it can still resume counts as running).
  Status Health() const override;
  std::string failed_node() const override;
  Status Rejoin() override;
  int pipeline_depth() const override;
  Status Clear() override;
  int64_t n_ctx() const override { return n_ctx_; }
  const model::ModelParams& params() const override { return params_; }
  std::vector<exec::StageInfo> stages() const override;

  // Times each resumption took, for benchmarks (seconds).
  struct ResumeTimes {
    double open_s = 0;       // from noticing the failure to the new pipeline being ready
    double recompute_s = 0;  // re-computing the caches
    int64_t recomputed_tokens = 0;
  };
  std::vector<ResumeTimes> resumes() const;

 private:
  struct SamplerState {
    sampling::SamplerParams params;
    std::vector<int32_t> history;  // the last repeat_last_n tokens it has seen
    uint64_t draws = 0;            // random draws made since it was configured
  };
  // A batch submitted and not yet folded into the state (or a Clear, in order with them).
  struct Entry {
    uint64_t ticket = 0;
    bool clear = false;
    model::Batch batch;
    exec::RunOptions options;
    uint64_t inner = 0;         // its ticket on the current pipeline
    bool inner_open = false;    // that ticket is still to be collected
    bool collected = false;     // the caller has its output
    std::vector<int32_t> tokens;  // its sampled tokens, once collected
  };

  void Fold(const Entry& e);  // applies a finished entry to cache_ and samplers_
  void PopCollected();
  // After a failure of the current pipeline (`why`): a new one, with the state re-computed and the
  // batches in flight submitted again. `lost` names the failed node ("" if none is known).
  Status Resume(Status why);
  // Opens a pipeline over `workers`, re-computes the state and re-submits the entries in flight.
  Status Rebuild(const std::vector<std::string>& workers, bool quiet, ResumeTimes* t);
  std::vector<std::string> Candidates() const;  // the workers not known to be down, in order
  Status ProbeWaiting(const std::string& worker);
  void Log(const std::string& line) const;
  std::string PlanLine() const;

  ResumeOptions o_;
  PipelineOpener open_;
  WorkerProbe probe_;
  int64_t n_ctx_ = 0;
  model::ModelParams params_;

  mutable std::mutex mu_;  // guards inner_, dead_, failed_ and resumes_ against Health()
  std::unique_ptr<exec::Executor> inner_;
  std::optional<Status> dead_;  // resumption failed: the reason
  std::string failed_;          // the nodes lost, for failed_node()
  std::vector<ResumeTimes> resumes_;

  std::vector<std::string> current_;  // the workers of inner_, in order
  std::set<std::string> down_;        // workers lost and not seen back
  std::chrono::steady_clock::time_point last_rejoin_{};
  std::map<int32_t, std::vector<int32_t>> cache_;  // per sequence, the token at each position
  // The batches folded since the last Clear, as they were computed (rows, truncations, sampler
  // configurations), while they hold at most kMaxLogRows rows; replayed in the same shapes they
  // rebuild the caches to the bit. Beyond the bound (a long-running server), the caches are
  // re-computed from cache_ in one batch instead (log_exact_ false).
  static constexpr int64_t kMaxLogRows = 1 << 16;
  std::vector<Entry> log_;
  int64_t log_rows_ = 0;
  bool log_exact_ = true;
  std::map<int32_t, SamplerState> samplers_;
  std::deque<Entry> flight_;
  uint64_t next_ticket_ = 0;
};

}  // namespace tandem::pipeline
