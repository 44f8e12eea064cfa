// Coordinator: the main node's side of a pipeline split over workers (an exec::Executor).
//
// Open() connects to every worker (authenticated handshake), prints the placement plan (layers,
// weight and KV bytes per node), asks each worker to load its layer range from its own copy of
// the model (with progress), links each worker to the next, and keeps the embedding and the
// first layers here. Per Run(), the main node computes its layers for each micro-batch of
// `ubatch` tokens and sends the hidden states to the first worker, which sends its output to the
// next, and so on; the last worker samples and sends back only the token id (and logits when
// asked). While a worker computes micro-batch i, the main node already computes i+1. Exactly
// one message crosses each stage boundary per micro-batch; nothing else is on the decode path.
//
// Failures: the main node pings every worker; a worker that disconnects, reports an error, or
// stays silent for `dead_after_ms` fails the current and every later Run() with a status that
// names the worker and the reason. Nothing blocks forever.
//
// Thread safety: one Run() at a time; connection callbacks run on their own threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/sys.h"
#include "exec/executor.h"
#include "pipeline/planner.h"
#include "modelstore/model_files.h"
#include "net/auth.h"
#include "net/socket.h"

namespace tandem::pipeline {

// How to run a model: on this machine alone (no workers) or as a pipeline's main node. The one
// options struct of pipeline::OpenExecutor (executor_factory.h), which builds either.
struct ExecutorOptions {
  std::vector<std::string> workers;  // HOST[:PORT], in pipeline order (empty: this machine alone)
  // With workers: when one fails, go on over the rest plus these (pipeline/resuming_executor.h);
  // `resume` false: fail the run instead, naming the worker.
  std::vector<std::string> standby;
  bool resume = true;
  int64_t n_ctx = 4096;
  int threads = sys::DefaultThreadCount();  // for this machine's stage
  // Prompt tokens per micro-batch, on one node and in a pipeline alike; 0: chosen per prompt from
  // its length and the number of stages (exec::AutoMicroBatch).
  int64_t ubatch = 0;
  PlanOptions plan;
  model::ContextOptions context;  // flash attention and KV cache types, on every stage
  bool use_mmap = false;  // every stage computes from its file map instead of a huge-page copy
  std::optional<net::Key> key;
  // Where the model's tensor digests are kept between runs (see modelstore::DigestModel); empty:
  // hashed on every run.
  std::string digest_record_dir = modelstore::DefaultDigestRecordDir();
  std::function<void(const std::string&)> log;  // progress and the plan (default: stderr)
  int connect_timeout_ms = 3000;
  int ping_interval_ms = 500;
  int dead_after_ms = 2500;
};

// Writes a line of progress or of the plan where `options` says (its log, else stderr).
void LogLine(const ExecutorOptions& options, const std::string& line);

// Workers connected and authenticated, in pipeline order, and the nodes planned over (this
// machine first): free memory, measured speed and round trip.
struct ConnectedWorkers {
  std::vector<NodeInfo> nodes;
  std::vector<std::string> names;  // "HOST:PORT" per worker
  std::vector<std::pair<std::string, uint16_t>> addrs;
  std::vector<net::Socket> sockets;
};

// A plan and the workers it uses (those it leaves out are already told their session is over);
// plan.stages[i].node indexes workers.nodes.
struct PlannedPipeline {
  ConnectedWorkers workers;
  Plan plan;
};

// Connects to options.workers, measures each round trip (and, for `--plan auto`, this machine's
// speed), plans, and writes the plan to `log`. A plan of one stage means this machine alone.
Result<PlannedPipeline> PlanPipeline(const model::Model& model, const ExecutorOptions& options,
                                     const std::function<void(const std::string&)>& log);

// --dry-run: the plan Open would make (connecting to the workers and reading their free memory,
// then ending their sessions), as the text Open prints, without loading anything.
Result<std::string> DescribePlan(const model::Model& model, const ExecutorOptions& options);

class Coordinator : public exec::Executor {
 public:
  // `model` is this node's mapping of the file at `model_path` (only the embedding and the
  // first stage's layers are touched); unless options.use_mmap, Open copies the first stage's
  // matrices into memory (Model::CopyIntoMemory), so `model` must not be in use elsewhere.
  static Result<std::unique_ptr<Coordinator>> Open(model::Model& model,
                                                   const std::string& model_path,
                                                   const ExecutorOptions& options);
  // The same over a pipeline already planned (PlanPipeline) with at least one worker.
  static Result<std::unique_ptr<Coordinator>> Open(model::Model& model, const std::string& model_path,
                                                   const ExecutorOptions& options, PlannedPipeline planned);
  ~Coordinator() override;

  Result<uint64_t> Submit(const model::Batch& batch, const exec::RunOptions& options) override;
  Status Collect(uint64_t ticket, exec::RunOutput* out) override;
  Status Clear() override;
  Status Health() const override;
  std::string failed_node() const override;
  int64_t n_ctx() const override;
  const model::ModelParams& params() const override;
  std::vector<exec::StageInfo> stages() const override;

  const Plan& plan() const;
  // Weight bytes the workers received over the network for this session (0 when every worker
  // had a local copy).
  uint64_t weight_bytes_received() const;
  // Names of the stages' nodes, in order ("main", "HOST:PORT", ...).
  std::vector<std::string> node_names() const;

  struct Impl;

 private:
  explicit Coordinator(std::unique_ptr<Impl> impl);
  static Status CheckOptions(const model::Model& model, const ExecutorOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::pipeline
