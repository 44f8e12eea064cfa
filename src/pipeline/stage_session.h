// StageSession: one main node's session on a worker (see worker.h for the daemon around it).
//
// The main node's connection brings, in order: LoadModel (find the model locally, in the weight
// cache, or receive this stage's bytes once; copy the layers into memory; refuse a stage that
// does not fit before reading anything), LinkNext (connect to the next stage), then Forward
// frames, which may also arrive from the previous stage once it attached. Each Forward runs
// through this node's exec::Stage; the output goes to the next stage, or (last stage) the token
// and logits go back to the main node. A decode-sized Forward that finds the session idle runs
// on the reader thread that decoded it; everything else runs in arrival order on the session's
// compute thread. A heartbeat pings the next stage and ends the session when the main node
// falls silent.
//
// Thread safety: every method may be called from any thread; Shutdown any number of times.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "net/socket.h"
#include "pipeline/worker.h"

namespace tandem::pipeline {

class StageSession {
 public:
  // `free_memory`: what the worker may use for weights and KV cache (0: unknown, no check).
  StageSession(const WorkerOptions& options, uint64_t free_memory, std::string peer);
  ~StageSession();  // joins every thread

  const std::string& peer() const;
  uint64_t id() const;       // the session id from LoadModel (0 before)
  bool finished() const;

  // Starts serving the main node's connection (its reader, the compute and heartbeat threads).
  void Begin(net::Socket main_node);
  // The previous stage's connection; InvalidArgument if one is attached already.
  Status AttachUpstream(net::Socket s, const std::string& peer);
  // Stops everything and closes the connections.
  void Shutdown(const std::string& why);
  void Join();

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::pipeline
