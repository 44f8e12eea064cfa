#include "linkemu/link_emulator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/sys.h"

namespace tandem::linkemu {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxChunkBytes = 64 * 1024;
constexpr size_t kMinShapedChunkBytes = 1460;  // one Ethernet-sized TCP segment
constexpr int kConnectTimeoutMs = 5000;

std::string ErrnoMessage(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Closes a socket so that the peer gets a TCP reset instead of an orderly end of stream.
void CloseWithReset(int& fd) {
  if (fd < 0) return;
  linger lg{};
  lg.l_onoff = 1;
  lg.l_linger = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  CloseFd(fd);
}

Status PrepareSocket(int fd) {
  const int one = 1;
  // Not every socket family has TCP_NODELAY (the listen address could be a name resolving to
  // something odd); a failure there is not fatal, a non-blocking failure is.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return Status::IOError(ErrnoMessage("fcntl(O_NONBLOCK)", errno));
  }
  return Status::Ok();
}

// Makes a wake flag readable until drained (a level-triggered "something happened" flag for poll).
void Signal(const sys::WakeFd& w) {
  const uint64_t one = 1;
  ssize_t r;
  do {
    r = ::write(w.write_fd, &one, sizeof(one));
  } while (r < 0 && errno == EINTR);
}

void Drain(const sys::WakeFd& w) {
  uint64_t v;
  while (::read(w.read_fd, &v, sizeof(v)) > 0) {
  }
}

// Sleeping threads wake within microseconds of their deadline instead of the default 50 us slack.
void UsePreciseTimers() { sys::UsePreciseTimers(); }

struct Resolved {
  std::vector<std::pair<sockaddr_storage, socklen_t>> addrs;
};

Result<Resolved> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    return Status::InvalidArgument("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  }
  Resolved out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
    sockaddr_storage ss{};
    std::memcpy(&ss, a->ai_addr, a->ai_addrlen);
    out.addrs.emplace_back(ss, static_cast<socklen_t>(a->ai_addrlen));
  }
  ::freeaddrinfo(res);
  if (out.addrs.empty()) return Status::NotFound("no address for '" + host + "'");
  return out;
}

// Shared by the emulator and all its connections; outlives every connection.
struct Shared {
  mutable std::mutex cfg_mu;
  LinkConfig cfg;  // guarded by cfg_mu
  std::atomic<bool> stalled{false};
  std::atomic<uint64_t> bytes{0};
  sys::WakeFd reap;  // signalled when a connection's threads have all ended

  LinkConfig config() const {
    std::lock_guard<std::mutex> lk(cfg_mu);
    return cfg;
  }
};

struct Chunk {
  enum class Kind { kData, kEof, kReset };
  Kind kind = Kind::kData;
  std::vector<char> data;
  Clock::time_point depart;
};

// One direction of one connection: bytes read from `src` are queued with a departure time and
// written to `dst` at that time.
struct Direction {
  int src = -1;
  int dst = -1;
  std::mutex mu;
  std::condition_variable cv;  // reader and sender both wait on it (notify_all)
  std::deque<Chunk> queue;     // guarded by mu
  size_t queued_bytes = 0;     // guarded by mu
  Clock::time_point last_depart{};
  std::mt19937_64 rng;
};

uint64_t NextSeed() {
  static std::atomic<uint64_t> counter{0};
  const uint64_t t = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  return t ^ (0x9e3779b97f4a7c15ULL * (counter.fetch_add(1) + 1));
}

}  // namespace

Status ValidateConfig(const LinkConfig& cfg) {
  auto bad = [](double v) { return !std::isfinite(v) || v < 0; };
  if (bad(cfg.delay_ms)) return Status::InvalidArgument("delay_ms must be finite and >= 0");
  if (bad(cfg.jitter_ms)) return Status::InvalidArgument("jitter_ms must be finite and >= 0");
  if (bad(cfg.bandwidth_mbps)) {
    return Status::InvalidArgument("bandwidth_mbps must be finite and >= 0");
  }
  return Status::Ok();
}

namespace {

// A proxied connection: client <-> target, four threads (a reader and a sender per direction).
class Connection {
 public:
  static Result<std::unique_ptr<Connection>> Create(Shared* shared, int client_fd, int target_fd) {
    sys::WakeFd wake;
    if (!sys::OpenWakeFd(&wake)) {
      const int err = errno;
      return Status::IOError(ErrnoMessage("wake flag", err));
    }
    return std::unique_ptr<Connection>(new Connection(shared, client_fd, target_fd, wake));
  }

  ~Connection() {
    JoinAndClose();
    sys::CloseWakeFd(&wake_);
  }

  // Starts the threads. On failure the connection is aborted and nothing is left running.
  Status Launch() {
    live_.store(static_cast<int>(threads_.size()));
    size_t started = 0;
    try {
      threads_[0] = std::thread([this] { ReadLoop(up_); });
      ++started;
      threads_[1] = std::thread([this] { SendLoop(up_); });
      ++started;
      threads_[2] = std::thread([this] { ReadLoop(down_); });
      ++started;
      threads_[3] = std::thread([this] { SendLoop(down_); });
      ++started;
    } catch (const std::system_error& e) {
      Abort();
      // Account for the threads that never started; the last one to end reports done.
      const int missing = static_cast<int>(threads_.size() - started);
      if (live_.fetch_sub(missing) == missing) done_.store(true);
      return Status::ResourceExhausted(std::string("cannot start a connection thread: ") +
                                       e.what());
    }
    return Status::Ok();
  }

  // Stops all four threads promptly; the sockets will be closed with a reset.
  void Abort() {
    aborted_.store(true);
    Signal(wake_);
    Wake();
  }

  // Re-evaluates every wait (after a stall change). Locking before notifying means a thread
  // about to sleep on the old state cannot miss the wake-up.
  void Wake() {
    for (Direction* d : {&up_, &down_}) {
      { std::lock_guard<std::mutex> lk(d->mu); }
      d->cv.notify_all();
    }
  }

  bool done() const { return done_.load(); }

  // Joins the threads and closes both sockets (with a reset if the connection was aborted).
  void JoinAndClose() {
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    if (aborted_.load()) {
      CloseWithReset(client_fd_);
      CloseWithReset(target_fd_);
    } else {
      CloseFd(client_fd_);
      CloseFd(target_fd_);
    }
  }

 private:
  Connection(Shared* shared, int client_fd, int target_fd, sys::WakeFd wake)
      : shared_(shared), client_fd_(client_fd), target_fd_(target_fd), wake_(wake) {
    up_.src = client_fd;
    up_.dst = target_fd;
    down_.src = target_fd;
    down_.dst = client_fd;
    up_.rng.seed(NextSeed());
    down_.rng.seed(NextSeed());
  }

  void ThreadEnded() {
    if (live_.fetch_sub(1) == 1) {
      done_.store(true);
      Signal(shared_->reap);
    }
  }

  // Queues a chunk read at `arrival` with its departure time under the current configuration.
  void Enqueue(Direction& d, Chunk::Kind kind, const char* data, size_t n, const LinkConfig& cfg,
               Clock::time_point arrival) {
    Chunk c;
    c.kind = kind;
    if (n > 0) c.data.assign(data, data + n);
    const double tx_s = cfg.bandwidth_mbps > 0 ? n * 8.0 / (cfg.bandwidth_mbps * 1e6) : 0.0;
    {
      std::lock_guard<std::mutex> lk(d.mu);
      double jitter_ms = 0;
      if (cfg.jitter_ms > 0) {
        jitter_ms = std::uniform_real_distribution<double>(0.0, cfg.jitter_ms)(d.rng);
      }
      const auto tx =
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(tx_s));
      const auto lag = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double, std::milli>(cfg.delay_ms + jitter_ms));
      c.depart = std::max(d.last_depart + tx, arrival + lag + tx);
      d.last_depart = c.depart;
      d.queued_bytes += n;
      d.queue.push_back(std::move(c));
    }
    d.cv.notify_all();
  }

  void ReadLoop(Direction& d) {
    std::vector<char> buf(kMaxChunkBytes);
    while (true) {
      {
        std::unique_lock<std::mutex> lk(d.mu);
        d.cv.wait(lk, [&] {
          return aborted_.load() ||
                 (!shared_->stalled.load() && d.queued_bytes < LinkEmulator::kMaxQueuedBytes);
        });
        if (aborted_.load()) break;
      }
      std::array<pollfd, 2> fds{{{d.src, POLLIN, 0}, {wake_.read_fd, POLLIN, 0}}};
      const int pr = ::poll(fds.data(), fds.size(), -1);
      if (pr < 0) {
        if (errno == EINTR) continue;
        Enqueue(d, Chunk::Kind::kReset, nullptr, 0, shared_->config(), Clock::now());
        break;
      }
      if (fds[1].revents != 0) break;  // aborted
      const LinkConfig cfg = shared_->config();
      size_t limit = kMaxChunkBytes;
      if (cfg.bandwidth_mbps > 0) {
        // About one millisecond of link time per chunk, so a capped link is smooth.
        const double per_ms = cfg.bandwidth_mbps * 1e6 / 8.0 / 1000.0;
        limit = static_cast<size_t>(std::clamp(per_ms, static_cast<double>(kMinShapedChunkBytes),
                                               static_cast<double>(kMaxChunkBytes)));
      }
      const ssize_t n = ::recv(d.src, buf.data(), limit, 0);
      const auto arrival = Clock::now();
      if (n > 0) {
        Enqueue(d, Chunk::Kind::kData, buf.data(), static_cast<size_t>(n), cfg, arrival);
      } else if (n == 0) {
        Enqueue(d, Chunk::Kind::kEof, nullptr, 0, cfg, arrival);
        break;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        Enqueue(d, Chunk::Kind::kReset, nullptr, 0, cfg, arrival);
        break;
      }
    }
    ThreadEnded();
  }

  // Writes all of `data` to `fd`, waiting for room; false on error or abort.
  bool WriteAll(int fd, const char* data, size_t n) {
    while (n > 0) {
      const ssize_t w = sys::SendNoSignal(fd, data, n);
      if (w > 0) {
        data += w;
        n -= static_cast<size_t>(w);
        shared_->bytes.fetch_add(static_cast<uint64_t>(w));
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
      std::array<pollfd, 2> fds{{{fd, POLLOUT, 0}, {wake_.read_fd, POLLIN, 0}}};
      const int pr = ::poll(fds.data(), fds.size(), -1);
      if (pr < 0 && errno != EINTR) return false;
      if (fds[1].revents != 0) return false;
    }
    return true;
  }

  void SendLoop(Direction& d) {
    UsePreciseTimers();
    while (true) {
      Chunk c;
      {
        std::unique_lock<std::mutex> lk(d.mu);
        while (true) {
          if (aborted_.load()) break;
          if (shared_->stalled.load() || d.queue.empty()) {
            d.cv.wait(lk);
            continue;
          }
          const auto depart = d.queue.front().depart;
          if (Clock::now() < depart) {
            d.cv.wait_until(lk, depart);
            continue;
          }
          break;
        }
        if (aborted_.load()) break;
        c = std::move(d.queue.front());
        d.queue.pop_front();
        d.queued_bytes -= c.data.size();
      }
      d.cv.notify_all();  // the reader may be waiting for room
      if (c.kind == Chunk::Kind::kData) {
        if (!WriteAll(d.dst, c.data.data(), c.data.size())) {
          Abort();
          break;
        }
      } else if (c.kind == Chunk::Kind::kEof) {
        ::shutdown(d.dst, SHUT_WR);  // forward the half-close
        break;
      } else {
        Abort();  // the source was reset: reset both sides
        break;
      }
    }
    ThreadEnded();
  }

  Shared* const shared_;
  int client_fd_;
  int target_fd_;
  sys::WakeFd wake_;  // readable once aborted
  std::atomic<bool> aborted_{false};
  std::atomic<bool> done_{false};
  std::atomic<int> live_{0};
  Direction up_;    // client -> target
  Direction down_;  // target -> client
  std::array<std::thread, 4> threads_;
};

}  // namespace

struct LinkEmulator::Impl {
  Shared shared;
  int listen_fd = -1;
  sys::WakeFd stop;  // readable once Stop() began
  Resolved target;
  std::thread acceptor;

  std::mutex mu;
  std::vector<std::unique_ptr<Connection>> conns;  // guarded by mu
  bool stopped = false;                            // guarded by mu

  ~Impl() {
    CloseFd(listen_fd);
    sys::CloseWakeFd(&stop);
    sys::CloseWakeFd(&shared.reap);
  }

  // Connects to the target within kConnectTimeoutMs (or until Stop()); -1 on failure.
  int ConnectTarget() {
    for (const auto& [addr, len] : target.addrs) {
      const int fd = sys::OpenSocket(addr.ss_family, SOCK_STREAM, 0, /*nonblocking=*/false);
      if (fd < 0) continue;
      int sfd = fd;
      if (!PrepareSocket(sfd).ok()) {
        CloseFd(sfd);
        continue;
      }
      if (::connect(sfd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) return sfd;
      if (errno != EINPROGRESS) {
        CloseFd(sfd);
        continue;
      }
      std::array<pollfd, 2> fds{{{sfd, POLLOUT, 0}, {stop.read_fd, POLLIN, 0}}};
      int pr;
      do {
        pr = ::poll(fds.data(), fds.size(), kConnectTimeoutMs);
      } while (pr < 0 && errno == EINTR);
      int err = 0;
      socklen_t elen = sizeof(err);
      if (pr > 0 && fds[1].revents == 0 &&
          ::getsockopt(sfd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0) {
        return sfd;
      }
      CloseFd(sfd);
      if (fds[1].revents != 0) return -1;  // stopping
    }
    return -1;
  }

  void HandleClient(int client) {
    if (!PrepareSocket(client).ok()) {
      CloseWithReset(client);
      return;
    }
    int upstream = ConnectTarget();
    if (upstream < 0) {
      CloseWithReset(client);
      return;
    }
    auto conn = Connection::Create(&shared, client, upstream);
    if (!conn.ok()) {
      CloseWithReset(client);
      CloseWithReset(upstream);
      return;
    }
    std::unique_ptr<Connection> c = std::move(conn).value();
    // Listed before any byte can flow, so a client that got a reply also sees its connection in
    // active_connections() and DropAll(). The threads never take `mu`.
    std::lock_guard<std::mutex> lk(mu);
    if (c->Launch().ok()) conns.push_back(std::move(c));
    // else ~Connection (under mu, harmless) joins what started and resets both sockets.
  }

  // Joins and closes the connections whose threads have all ended.
  void Reap() {
    std::vector<std::unique_ptr<Connection>> finished;
    {
      std::lock_guard<std::mutex> lk(mu);
      auto it = std::stable_partition(conns.begin(), conns.end(),
                                      [](const auto& c) { return !c->done(); });
      std::move(it, conns.end(), std::back_inserter(finished));
      conns.erase(it, conns.end());
    }
    finished.clear();  // joins (already ended) and closes
  }

  void AcceptLoop() {
    while (true) {
      std::array<pollfd, 3> fds{
          {{listen_fd, POLLIN, 0}, {stop.read_fd, POLLIN, 0}, {shared.reap.read_fd, POLLIN, 0}}};
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (fds[1].revents != 0) return;
      if (fds[2].revents != 0) {
        Drain(shared.reap);
        Reap();
      }
      if (fds[0].revents == 0) continue;
      while (true) {
        const int client = sys::AcceptSocket(listen_fd);
        if (client >= 0) {
          HandleClient(client);
          continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // Out of descriptors or memory: back off instead of spinning on a readable socket.
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        break;
      }
    }
  }

  std::vector<std::unique_ptr<Connection>> TakeAll() {
    std::lock_guard<std::mutex> lk(mu);
    return std::exchange(conns, {});
  }
};

LinkEmulator::LinkEmulator(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}

LinkEmulator::~LinkEmulator() {
  Stop();
}

Result<std::unique_ptr<LinkEmulator>> LinkEmulator::Start(std::string listen_host, int listen_port,
                                                          std::string target_host, int target_port,
                                                          LinkConfig cfg) {
  TANDEM_RETURN_IF_ERROR(ValidateConfig(cfg));
  if (listen_port < 0 || listen_port > 65535) {
    return Status::InvalidArgument("listen port out of range: " + std::to_string(listen_port));
  }
  if (target_port < 1 || target_port > 65535) {
    return Status::InvalidArgument("target port out of range: " + std::to_string(target_port));
  }
  auto impl = std::make_unique<Impl>();
  impl->shared.cfg = cfg;
  TANDEM_ASSIGN_OR_RETURN(impl->target, Resolve(target_host, target_port, /*passive=*/false));
  TANDEM_ASSIGN_OR_RETURN(Resolved listen_addrs,
                          Resolve(listen_host, listen_port, /*passive=*/true));

  if (!sys::OpenWakeFd(&impl->stop) || !sys::OpenWakeFd(&impl->shared.reap)) {
    return Status::IOError(ErrnoMessage("wake flag", errno));
  }

  std::string last_error = "no address";
  for (const auto& [addr, len] : listen_addrs.addrs) {
    int fd = sys::OpenSocket(addr.ss_family, SOCK_STREAM, 0, /*nonblocking=*/true);
    if (fd < 0) {
      last_error = ErrnoMessage("socket", errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // Accepted sockets inherit TCP_NODELAY on Linux; PrepareSocket sets it again anyway.
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
      last_error = ErrnoMessage("bind", errno);
      CloseFd(fd);
      continue;
    }
    if (::listen(fd, 128) != 0) {
      last_error = ErrnoMessage("listen", errno);
      CloseFd(fd);
      continue;
    }
    impl->listen_fd = fd;
    break;
  }
  if (impl->listen_fd < 0) {
    return Status::IOError("cannot listen on " + listen_host + ":" + std::to_string(listen_port) +
                           ": " + last_error);
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  if (::getsockname(impl->listen_fd, reinterpret_cast<sockaddr*>(&bound), &blen) != 0) {
    return Status::IOError(ErrnoMessage("getsockname", errno));
  }
  int port = 0;
  if (bound.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  } else if (bound.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
  }

  Impl* raw = impl.get();
  try {
    impl->acceptor = std::thread([raw] { raw->AcceptLoop(); });
  } catch (const std::system_error& e) {
    return Status::ResourceExhausted(std::string("cannot start the accept thread: ") + e.what());
  }
  return std::unique_ptr<LinkEmulator>(new LinkEmulator(std::move(impl), port));
}

Status LinkEmulator::SetConfig(const LinkConfig& cfg) {
  TANDEM_RETURN_IF_ERROR(ValidateConfig(cfg));
  std::lock_guard<std::mutex> lk(impl_->shared.cfg_mu);
  impl_->shared.cfg = cfg;
  return Status::Ok();
}

LinkConfig LinkEmulator::config() const {
  return impl_->shared.config();
}

void LinkEmulator::DropAll() {
  std::vector<std::unique_ptr<Connection>> all = impl_->TakeAll();
  for (auto& c : all) c->Abort();
  all.clear();  // joins the threads, then resets both sockets of each connection
}

void LinkEmulator::Stall(bool on) {
  impl_->shared.stalled.store(on);
  std::lock_guard<std::mutex> lk(impl_->mu);
  for (auto& c : impl_->conns) c->Wake();
}

void LinkEmulator::Stop() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  Signal(impl_->stop);
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  CloseFd(impl_->listen_fd);
  DropAll();
}

uint64_t LinkEmulator::bytes_forwarded() const {
  return impl_->shared.bytes.load();
}

int LinkEmulator::active_connections() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  int n = 0;
  for (const auto& c : impl_->conns) n += c->done() ? 0 : 1;
  return n;
}

}  // namespace tandem::linkemu
