// `tandem probe HOST[:PORT]`: is a worker reachable, does it accept our key (and prove it knows
// it), what does it report, and how long is a round trip to it. Exit status 1 when it is not
// usable. No session is opened: a busy worker can be probed too.
// `tandem keygen -o FILE`: a new pre-shared key file for --auth-key-file.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "apps/commands.h"
#include "apps/dist_flags.h"
#include "net/auth.h"
#include "net/socket.h"

namespace tandem::apps {
namespace {

Status Probe(const std::string& address, const std::string& key_file, int pings, int timeout_ms) {
  std::string host;
  uint16_t port = 0;
  TANDEM_RETURN_IF_ERROR(net::ParseHostPort(address, net::kDefaultPort, &host, &port));
  const std::string name = host + ":" + std::to_string(port);
  std::optional<net::Key> key;
  if (!key_file.empty()) {
    TANDEM_ASSIGN_OR_RETURN(net::Key k, net::LoadKeyFile(key_file));
    key = k;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Result<net::Socket> s = net::Socket::Connect(host, port, timeout_ms);
  if (!s.ok()) return s.status().WithContext(name + " is not reachable");
  const double connect_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  Result<net::WorkerInfo> info = net::ClientHandshake(*s, net::Role::kProbe, key, timeout_ms);
  if (!info.ok()) return info.status().WithContext(name + " refused the handshake");
  std::vector<double> rtt;
  for (int i = 0; i < pings; ++i) {
    const auto p0 = std::chrono::steady_clock::now();
    TANDEM_RETURN_IF_ERROR(net::WriteMessage(*s, net::MsgType::kPing, net::Ping{static_cast<uint64_t>(i + 1)}));
    TANDEM_ASSIGN_OR_RETURN(net::Ping pong, net::ReadMessage<net::Ping>(*s, net::MsgType::kPong, timeout_ms));
    if (pong.id != static_cast<uint64_t>(i + 1)) return Status::Corruption(name + " answered the wrong ping");
    rtt.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count());
  }
  std::sort(rtt.begin(), rtt.end());
  std::printf("%s: reachable (connect %.2f ms), %s, protocol %u\n", name.c_str(), connect_ms,
              key ? "key accepted and proven by the worker" : "no key (loopback or --insecure worker)",
              net::kProtocolVersion);
  std::printf("  host %s, %s, %u threads, %.1f GiB free, Q4_K matvec %.1f GB/s, %s\n", info->name.c_str(),
              info->cpu_features.c_str(), info->threads, info->free_memory / 1073741824.0, info->matvec_gbps,
              info->busy ? "busy (serving a main node now)" : "idle");
  if (!rtt.empty()) {
    std::printf("  round trip %.3f ms median, %.3f ms min, %.3f ms max (%zu pings)\n", rtt[rtt.size() / 2],
                rtt.front(), rtt.back(), rtt.size());
  }
  return Status::Ok();
}

}  // namespace

void RegisterProbe(CLI::App& app, int* exit_code) {
  struct Args {
    std::vector<std::string> workers;
    std::vector<std::string> flagged;  // --worker / --rpc, as run and bench take them
    std::string key_file;
    int pings = 10;
    int timeout_ms = 3000;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "probe", "Check workers: reachable, key accepted, what they report, round-trip time");
  cmd->add_option("workers", a->workers, "HOST[:PORT] of each worker (port 50052 by default)");
  AddWorkerFlags(cmd, &a->flagged);  // so that the flags of a run can be pasted as they are
  cmd->add_option("--auth-key-file", a->key_file, "Pre-shared key file (the same on every node)");
  cmd->add_option("--pings", a->pings, "Round trips to time")->capture_default_str()->check(CLI::Range(0, 1000));
  cmd->add_option("--timeout-ms", a->timeout_ms, "Connect and answer timeout")->capture_default_str()
      ->check(CLI::Range(1, 60000));
  cmd->callback([a, exit_code] {
    a->workers.insert(a->workers.end(), a->flagged.begin(), a->flagged.end());
    if (a->workers.empty()) {
      *exit_code = ReportError("probe needs a worker: tandem probe HOST[:PORT] ... (or --worker HOST[:PORT], --rpc A,B)");
      return;
    }
    for (const std::string& w : a->workers) {
      if (Status st = Probe(w, a->key_file, a->pings, a->timeout_ms); !st.ok()) *exit_code = ReportError(st.ToString());
    }
  });
}

void RegisterKeygen(CLI::App& app, int* exit_code) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "keygen", "Write a new key file for --auth-key-file (32 random bytes, readable by you only); copy it to every node");
  cmd->add_option("-o,--output", *path, "Where to write it (an existing file is never replaced)")->required();
  cmd->callback([path, exit_code] {
    if (Status st = net::WriteNewKeyFile(*path); !st.ok()) {
      *exit_code = ReportError(st.ToString());
      return;
    }
    std::printf("wrote a new key to %s; copy it to every worker and pass --auth-key-file %s everywhere\n", path->c_str(),
                path->c_str());
  });
}

}  // namespace tandem::apps
