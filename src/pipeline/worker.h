// Worker: the daemon `tandem worker` runs on each extra machine.
//
// It listens for connections (default port 50052). Every connection starts with the
// authenticated handshake (net/auth.h); the worker then reports its protocol version, CPU
// features, threads, free memory and a measured matrix-vector speed. A main node owns one
// session at a time (pipeline/stage_session.h): it loads a contiguous layer range of a model
// from a local GGUF copy (-m, --models-dir, its weight cache; the main node's own path only with
// --allow-main-path), links the worker to the next stage, and then sends Forward frames. A
// second main node is refused
// with a clear reason while a session runs. An upstream stage attaches to the running session
// and feeds it Forward frames directly, so activations go stage to stage.
//
// Per Forward frame the session applies the truncation, runs the layers and sends the hidden
// states to the next stage, or (on the last stage) samples and sends the token id (and logits
// when asked) to the main node. Frames run in arrival order on the session's compute thread,
// except that a Forward of at most 4 tokens (a decode step) that finds the session idle runs at
// once on the reader thread that decoded it, which saves a thread wake-up per stage boundary.
// Reader and sender threads per connection keep network I/O off the compute thread; idle
// threads sleep.
//
// Failures: malformed, oversized or unauthenticated frames close that connection with a logged
// error; the worker keeps serving. When the main node disconnects the session is freed. The
// worker pings the next stage and reports a silent link to the main node as an Error.
//
// Thread safety: Serve() on one thread; Stop() from any thread or a signal-safe flag.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/sys.h"
#include "gpu/device.h"
#include "net/auth.h"
#include "net/messages.h"
#include "net/socket.h"

namespace tandem::pipeline {

struct WorkerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = net::kDefaultPort;
  int threads = sys::DefaultThreadCount();  // physical cores (performance cores on Apple Silicon)
  uint64_t mem_bytes = 0;      // 0: the machine's available memory
  std::string model_path;      // local copy of the model (-m)
  std::string models_dir;      // where to look for a copy by content
  std::string cache_dir;       // weights received from a main node, kept for the next start
  // Also open the path the main node names for its own copy (useful when both run on one
  // machine). Off by default: a main node may then only name models this worker was told about
  // (-m, --models-dir, its cache), never probe other paths on its disk.
  bool use_main_path = false;
  std::optional<net::Key> key;
  bool insecure = false;       // allow a non-loopback address without a key
  std::function<void(const std::string&)> log;  // one line per event (default: stderr)
  int ping_interval_ms = 500;
  int link_dead_ms = 2500;         // the next stage silent this long: report it
  int main_node_dead_ms = 10000;   // the main node silent this long: free the session
  // A main node that finds the worker busy waits this long for the running session to end before
  // it is refused: a main node that has just closed its session may connect again before this
  // worker has read the close.
  int busy_grace_ms = 1000;
  // Connections served at once (handshakes, the session, attached stages, probes); more are
  // closed unread.
  int max_connections = 16;
  // The GPU the stages run on (gpu/device.h; null: the CPU), and how many of a stage's layers go
  // there (-1: as many as fit), the last ones of its range. A device the driver loses ends the
  // session that used it; the worker opens it again for the next one (or uses the CPU).
  std::shared_ptr<gpu::Device> device;
  int64_t gpu_layers = -1;
};

class Worker {
 public:
  // Binds the port (checking the key rule) and measures the matrix-vector speed.
  static Result<std::unique_ptr<Worker>> Start(WorkerOptions options);
  ~Worker();

  uint16_t port() const;
  // What the worker measured at Start (its GPU list changes only if a lost GPU cannot be opened
  // again; read it before Serve or from Serve's thread).
  const net::WorkerInfo& info() const;
  // Serves connections until Stop() or *stop_flag (checked every 200 ms) becomes true.
  void Serve(const std::atomic<bool>* stop_flag = nullptr);
  // Ends the running session at once (its connections close) and makes Serve() return.
  void Stop();

  struct Impl;

 private:
  explicit Worker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::pipeline
