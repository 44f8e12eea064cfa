// LinkEmulator: a userspace TCP proxy that makes a loopback connection behave like a slower link.
//
// Tests and benchmarks put it between two tandem stages (kernel traffic shaping with delay,
// `tc netem`, is not available everywhere). It listens on one address and forwards every accepted
// connection to a target address, adding to each direction independently:
//   - a one-way delay plus uniform random jitter in [0, jitter_ms] per chunk read, without ever
//     reordering bytes, and
//   - an optional bandwidth cap that serialises the chunks at that rate.
// Timing model (per direction, per chunk of `n` bytes read at time `t`):
//   tx        = bandwidth_mbps > 0 ? n * 8 / (bandwidth_mbps * 1e6) seconds : 0
//   departure = max(previous departure + tx, t + delay + U[0, jitter] + tx)
// and the chunk is written to the other side at its departure time (threads sleep until then;
// nothing spins). A configuration change applies to chunks read after it. With a bandwidth cap
// chunks are read at most ~1 ms of link time at once (>= 1460 bytes) so the rate is smooth.
//
// Each direction reads on one thread and writes on another, so reading goes on while delayed data
// waits; a direction stops reading while more than kMaxQueuedBytes are queued. End of stream is
// forwarded in order (a half-close becomes a half-close after the delay); a reset or a write error
// resets both sides of that connection. Every socket has TCP_NODELAY.
//
// Thread safety: all public member functions may be called from any thread, concurrently. Stop()
// (and the destructor) must not race with destruction by another thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace tandem::linkemu {

struct LinkConfig {
  double delay_ms = 0;        // one-way delay added to each direction
  double jitter_ms = 0;       // plus uniform random [0, jitter_ms] per chunk (never reorders)
  double bandwidth_mbps = 0;  // megabits (1e6 bits) per second per direction; 0 = unlimited
};

// OK if every field is finite and >= 0.
Status ValidateConfig(const LinkConfig& cfg);

class LinkEmulator {
 public:
  // Per direction of each connection, reading pauses while this much data is queued.
  static constexpr size_t kMaxQueuedBytes = size_t{64} << 20;

  // Listens on listen_host:listen_port (port 0 picks a free one) and forwards each accepted
  // connection to target_host:target_port, which is resolved now but connected to only when a
  // client arrives (if that connect fails the client is reset). Hosts are names or numeric
  // addresses.
  static Result<std::unique_ptr<LinkEmulator>> Start(std::string listen_host, int listen_port,
                                                     std::string target_host, int target_port,
                                                     LinkConfig cfg);

  ~LinkEmulator();  // Stop()
  LinkEmulator(const LinkEmulator&) = delete;
  LinkEmulator& operator=(const LinkEmulator&) = delete;

  // The port actually listened on.
  int port() const { return port_; }

  // Applies to data read from now on (queued data keeps its departure time). Invalid values are
  // refused and the configuration is unchanged.
  Status SetConfig(const LinkConfig& cfg);
  LinkConfig config() const;

  // Closes every proxied connection abruptly: both the client and the target side get a TCP reset
  // (SO_LINGER 0); queued data is discarded. Returns after their threads have ended. New
  // connections are accepted as before.
  void DropAll();

  // Stall(true) stops forwarding in both directions of every connection (connections stay open,
  // bytes already read are held, reading pauses too so the senders feel back-pressure) until
  // Stall(false). Applies to connections accepted while stalled as well.
  void Stall(bool on);

  // Stops listening and resets every connection, then joins all threads. Idempotent.
  void Stop();

  // Payload bytes written to either side, over all connections so far.
  uint64_t bytes_forwarded() const;
  // Connections currently being proxied.
  int active_connections() const;

 private:
  struct Impl;
  explicit LinkEmulator(std::unique_ptr<Impl> impl, int port);

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace tandem::linkemu
