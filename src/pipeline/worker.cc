#include "pipeline/worker.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "base/sys.h"
#include "kernels/kernels.h"
#include "kernels/speed.h"
#include "pipeline/stage_session.h"

namespace tandem::pipeline {

struct Worker::Impl {
  WorkerOptions o;
  net::Listener listener;
  net::WorkerInfo info;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::shared_ptr<StageSession> session;
  struct Pending {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Pending> pending;
  std::atomic<uint64_t> serial{0};
  uint64_t refused_connections = 0;  // over --max-connections (Serve's thread only)

  void Log(const std::string& line) const {
    if (o.log) {
      o.log(line);
    } else {
      std::fprintf(stderr, "tandem worker: %s\n", line.c_str());
    }
  }
  void Handle(net::Socket s);
  void Probe(net::Socket s, const net::ServerHello& h, const std::string& peer);
  void Reap(bool all);
  void ReopenLostDevice();
  net::WorkerInfo Info() {
    std::lock_guard<std::mutex> lock(mu);
    return info;
  }
};

// A GPU the driver lost (it reset, or fell off the bus) runs nothing again: the next session gets
// the device opened anew, or the CPU when it cannot be. Called under `mu`, between sessions.
void Worker::Impl::ReopenLostDevice() {
  const gpu::DeviceInfo was = o.device->info();
  const std::string name = was.name + " (" + was.description + ")";
  Result<std::unique_ptr<gpu::Device>> d = gpu::Device::Open(was.index);
  if (d.ok()) {
    o.device = std::move(*d);
    Log(name + " was lost; opened it again");
    return;
  }
  o.device = nullptr;
  info.gpus.clear();
  Log(name + " was lost and cannot be opened again (" + d.status().message() + "): sessions run on the CPU");
}

void Worker::Impl::Handle(net::Socket s) {
  if (stop) return;  // stopping: nothing new starts (the socket closes here)
  const std::string peer = s.PeerName();
  Result<net::ServerHello> h = net::ServerHandshake(s, o.key);
  if (!h.ok()) {
    Log("rejected connection from " + peer + ": " + h.status().message());
    return;
  }
  if (h->role == net::Role::kProbe) return Probe(std::move(s), *h, peer);
  if (h->role == net::Role::kMainNode) {
    std::unique_lock<std::mutex> lock(mu);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.busy_grace_ms);
    while (session && !session->finished() && !stop && std::chrono::steady_clock::now() < deadline) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      lock.lock();
    }
    if (session && !session->finished()) {
      const std::string why = "this worker is busy serving a session for " + session->peer();
      (void)net::SendRefused(s, why);
      Log("refused main node " + peer + ": busy");
      return;
    }
    if (session) {
      session->Join();
      session.reset();
    }
    if (o.device != nullptr && o.device->lost()) ReopenLostDevice();
    if (Status st = net::SendWelcome(s, o.key, *h, info); !st.ok()) {
      Log("lost " + peer + " during the handshake: " + st.message());
      return;
    }
    Log("session from " + peer + " started");
    session = std::make_shared<StageSession>(o, info.free_memory, peer);
    session->Begin(std::move(s));
    return;
  }
  if (Status st = net::SendWelcome(s, o.key, *h, Info()); !st.ok()) return;
  Result<net::Attach> a = net::ReadMessage<net::Attach>(s, net::MsgType::kAttach, net::kHandshakeTimeoutMs);
  if (!a.ok()) {
    Log("rejected stage connection from " + peer + ": " + a.status().message());
    return;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (!session || session->finished() || session->id() != a->session || a->session == 0) {
    (void)net::SendRefused(s, "no running session " + std::to_string(a->session));
    Log("refused stage connection from " + peer + ": no such session");
    return;
  }
  if (Status st = session->AttachUpstream(std::move(s), peer); !st.ok()) {
    Log("refused stage connection from " + peer + ": " + st.message());
    return;
  }
  Log("previous stage " + peer + " attached");
}

// `tandem probe`: the handshake (so the key is proven both ways), WorkerInfo with `busy` set, then
// Pong for each Ping until the probe closes, a frame is not a Ping, or 10 s pass. No session.
void Worker::Impl::Probe(net::Socket s, const net::ServerHello& h, const std::string& peer) {
  net::WorkerInfo now;
  {
    std::lock_guard<std::mutex> lock(mu);
    now = info;
    now.busy = session && !session->finished();
  }
  if (Status st = net::SendWelcome(s, o.key, h, now); !st.ok()) return;
  Log("probed by " + peer);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline && !stop) {
    Result<net::Ping> ping = net::ReadMessage<net::Ping>(s, net::MsgType::kPing, 2000);
    if (!ping.ok() || !net::WriteMessage(s, net::MsgType::kPong, *ping).ok()) return;
  }
}

void Worker::Impl::Reap(bool all) {
  std::shared_ptr<StageSession> done;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (session && (all || session->finished())) {
      if (all) session->Shutdown("the worker is stopping");
      done = std::move(session);
    }
  }
  if (done) done->Join();
  for (size_t i = 0; i < pending.size();) {
    if (all || pending[i].done->load()) {
      pending[i].thread.join();
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Worker::~Worker() {
  impl_->stop = true;
  impl_->Reap(true);
}

Result<std::unique_ptr<Worker>> Worker::Start(WorkerOptions o) {
  if (!net::IsLoopbackHost(o.host) && !o.key && !o.insecure) {
    return Status::InvalidArgument(
        "refusing to listen on " + o.host + " without --auth-key-file: anyone who can reach this port "
        "could use this machine. Give a key file (the same on every node), or --insecure");
  }
  auto impl = std::make_unique<Impl>();
  TANDEM_ASSIGN_OR_RETURN(impl->listener, net::Listener::Bind(o.host, o.port));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  impl->info.name = host;
  impl->info.cpu_features = kernels::IsaName(kernels::Best().isa);
  impl->info.threads = static_cast<uint32_t>(o.threads);
  impl->info.free_memory = o.mem_bytes > 0 ? o.mem_bytes : sys::Memory().available;
  impl->info.matvec_gbps = kernels::MeasureMatVecSpeed(o.threads);
  if (o.device != nullptr && o.gpu_layers != 0) {
    TANDEM_ASSIGN_OR_RETURN(const double gbps, gpu::MeasureReadBandwidth(*o.device));
    const gpu::DeviceInfo& d = o.device->info();
    impl->info.gpus.push_back({d.name, d.description, d.memory_bytes, static_cast<float>(gbps)});
  }
  impl->o = std::move(o);
  return std::unique_ptr<Worker>(new Worker(std::move(impl)));
}

uint16_t Worker::port() const { return impl_->listener.port(); }
const net::WorkerInfo& Worker::info() const { return impl_->info; }
void Worker::Stop() {
  impl_->stop = true;
  // The session's connections close now (its peers see the worker go at once); Serve joins it.
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->session) impl_->session->Shutdown("the worker is stopping");
}

void Worker::Serve(const std::atomic<bool>* stop_flag) {
  Impl& w = *impl_;
  while (!w.stop && !(stop_flag && stop_flag->load())) {
    Result<net::Socket> s = w.listener.Accept(200);
    w.Reap(false);
    if (!s.ok()) {
      if (s.status().code() != Code::kNotFound) w.Log("accept failed: " + s.status().message());
      continue;
    }
    // Each connection's handshake runs on its own thread until it becomes a session, an attached
    // stage or a probe; beyond the limit new connections are closed at once, before any byte of
    // theirs is read, so a flood of idle connections costs neither threads nor memory.
    if (static_cast<int>(w.pending.size()) >= w.o.max_connections) {
      if (w.refused_connections++ % 100 == 0) {
        w.Log("refusing connection from " + s->PeerName() + ": " + std::to_string(w.pending.size()) +
              " connections open (--max-connections " + std::to_string(w.o.max_connections) + ")");
      }
      continue;  // the socket closes here
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    w.pending.push_back({std::thread([&w, done, sock = std::move(*s)]() mutable {
                           w.Handle(std::move(sock));
                           *done = true;
                         }),
                         done});
  }
  w.Reap(true);
}

}  // namespace tandem::pipeline
