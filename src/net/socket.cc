#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

#include <cerrno>
#include <cstring>

#include "base/sys.h"
#include "net/seal.h"

namespace tandem::net {
namespace {

using Clock = std::chrono::steady_clock;

std::string Errno(std::string_view what) {
  return std::string(what) + ": " + std::strerror(errno);
}

void Tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

// Milliseconds left until `deadline`, or -1 for no deadline.
int Left(bool has_deadline, Clock::time_point deadline) {
  if (!has_deadline) return -1;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms);
}

}  // namespace

// The sealing state of a socket: per direction, its key and the number of the next frame.
struct Socket::Sealing {
  std::array<uint8_t, 32> send_key{}, receive_key{};
  uint64_t sent = 0, received = 0;
  std::vector<uint8_t> out;  // the sealed frame being sent
  ~Sealing() {
    sodium_memzero(send_key.data(), send_key.size());
    sodium_memzero(receive_key.data(), receive_key.size());
  }
};

Socket::Socket() = default;
Socket::Socket(int fd) : fd_(fd) {}
Socket::Socket(Socket&& o) noexcept : fd_(o.fd_), seal_(std::move(o.seal_)) { o.fd_ = -1; }
Socket::~Socket() { Close(); }

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = o.fd_;
    o.fd_ = -1;
    seal_ = std::move(o.seal_);
  }
  return *this;
}

void Socket::EnableSealing(const SessionKeys& keys) {
  seal_ = std::make_unique<Sealing>();
  seal_->send_key = keys.send;
  seal_->receive_key = keys.receive;
}

Status Socket::SendFrame(std::span<const uint8_t> frame) {
  if (!seal_) return SendAll(frame);
  SealFrame(seal_->send_key, seal_->sent++, frame, &seal_->out);
  return SendAll(seal_->out);
}

void Socket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::Shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::SetLingerZero() {
  linger l{1, 0};
  if (fd_ >= 0) setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

std::string Socket::PeerName() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (fd_ < 0 || getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return ss.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + port
                                  : std::string(host) + ":" + port;
}

Result<Socket> Socket::Connect(const std::string& host, uint16_t port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return Status::IOError("cannot resolve " + host + ": " + gai_strerror(rc));
  }
  std::string last = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    Socket s(sys::OpenSocket(a->ai_family, a->ai_socktype, a->ai_protocol, /*nonblocking=*/true));
    if (!s.valid()) {
      last = Errno("socket");
      continue;
    }
    int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s.fd(), POLLOUT, 0};
      rc = ::poll(&p, 1, timeout_ms);
      if (rc == 0) {
        last = "timed out after " + std::to_string(timeout_ms) + " ms";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (rc < 0 || err != 0) {
        errno = rc < 0 ? errno : err;
        last = Errno("connect");
        continue;
      }
    } else if (rc != 0) {
      last = Errno("connect");
      continue;
    }
    const int flags = fcntl(s.fd(), F_GETFL);
    fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK);
    Tune(s.fd());
    freeaddrinfo(res);
    return s;
  }
  freeaddrinfo(res);
  return Status::IOError("cannot connect to " + host + ":" + service + ": " + last);
}

Status Socket::SendAll(std::span<const uint8_t> b) {
  size_t off = 0;
  while (off < b.size()) {
    const ssize_t n = sys::SendNoSignal(fd_, b.data() + off, b.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(Errno("send"));
    }
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status Socket::RecvAll(std::span<uint8_t> b, int timeout_ms) {
  const bool has_deadline = timeout_ms >= 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  size_t off = 0;
  while (off < b.size()) {
    if (has_deadline) {
      pollfd p{fd_, POLLIN, 0};
      const int rc = ::poll(&p, 1, Left(true, deadline));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) return Status::IOError(Errno("poll"));
      if (rc == 0) return Status::IOError("timed out after " + std::to_string(timeout_ms) + " ms");
    }
    const ssize_t n = ::recv(fd_, b.data() + off, b.size() - off, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(Errno("recv"));
    }
    if (n == 0) return Status::IOError("connection closed by peer");
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<Listener> Listener::Bind(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return Status::IOError("cannot resolve " + host + ": " + gai_strerror(rc));
  }
  std::string last = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    Socket s(sys::OpenSocket(a->ai_family, a->ai_socktype, a->ai_protocol, /*nonblocking=*/false));
    if (!s.valid()) continue;
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(s.fd(), 16) != 0) {
      last = Errno("bind " + host + ":" + service);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len);
    Listener l;
    l.port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    l.sock_ = std::move(s);
    freeaddrinfo(res);
    return l;
  }
  freeaddrinfo(res);
  return Status::IOError("cannot listen: " + last);
}

Result<Socket> Listener::Accept(int timeout_ms) {
  pollfd p{sock_.fd(), POLLIN, 0};
  const int rc = ::poll(&p, 1, timeout_ms);
  if (rc == 0 || (rc < 0 && errno == EINTR)) return Status::NotFound("no connection");
  if (rc < 0) return Status::IOError(Errno("poll"));
  const int fd = sys::AcceptSocket(sock_.fd());
  if (fd < 0) return Status::IOError(Errno("accept"));
  Tune(fd);
  return Socket(fd);
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

Status ParseHostPort(const std::string& s, uint16_t default_port, std::string* host, uint16_t* port) {
  std::string h = s, p;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find(']');
    if (close == std::string::npos) return Status::InvalidArgument("bad address '" + s + "'");
    h = s.substr(1, close - 1);
    if (close + 1 < s.size()) {
      if (s[close + 1] != ':') return Status::InvalidArgument("bad address '" + s + "'");
      p = s.substr(close + 2);
    }
  } else if (const size_t colon = s.rfind(':'); colon != std::string::npos && s.find(':') == colon) {
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
  }
  if (h.empty()) return Status::InvalidArgument("address '" + s + "' has no host");
  *host = h;
  *port = default_port;
  if (!p.empty()) {
    char* end = nullptr;
    const long v = std::strtol(p.c_str(), &end, 10);
    if (*end != 0 || v <= 0 || v > 65535) {
      return Status::InvalidArgument("address '" + s + "' has a bad port");
    }
    *port = static_cast<uint16_t>(v);
  }
  return Status::Ok();
}

Status ReadFrame(Socket& s, FrameHeader* h, std::vector<uint8_t>* payload, int timeout_ms,
                 uint32_t max_payload) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  std::array<uint8_t, kFrameHeaderBytes> hb;
  TANDEM_RETURN_IF_ERROR(s.RecvAll(hb, timeout_ms));
  TANDEM_ASSIGN_OR_RETURN(*h, DecodeFrameHeader(hb));
  if (s.seal_) {
    Socket::Sealing& z = *s.seal_;
    if (h->type != static_cast<uint16_t>(MsgType::kSealed)) {
      return Status::Corruption("an unsealed " + std::string(MsgTypeName(h->type)) + " frame arrived on a sealed connection");
    }
    if (h->payload_bytes < kSealOverheadBytes || h->payload_bytes - kSealOverheadBytes > max_payload) {
      return Status::Corruption("Sealed frame of " + std::to_string(h->payload_bytes) + " bytes where " +
                                std::to_string(kSealOverheadBytes) + " to " + std::to_string(max_payload + kSealOverheadBytes) +
                                " are allowed");
    }
    payload->resize(h->payload_bytes);
    TANDEM_RETURN_IF_ERROR(s.RecvAll(*payload, timeout_ms < 0 ? -1 : Left(true, deadline)));
    TANDEM_RETURN_IF_ERROR(OpenFrame(z.receive_key, z.received, hb, payload, h, max_payload));
    ++z.received;
    return Status::Ok();
  }
  // Checked before anything is allocated for it: a peer that has not authenticated yet cannot
  // make this side reserve more than the message it may send.
  if (h->payload_bytes > max_payload) {
    return Status::Corruption(std::string(MsgTypeName(h->type)) + " frame of " + std::to_string(h->payload_bytes) +
                              " bytes where at most " + std::to_string(max_payload) + " are allowed");
  }
  payload->resize(h->payload_bytes);
  // One deadline for the whole frame: a peer that dribbles the payload does not get a second one.
  return s.RecvAll(*payload, timeout_ms < 0 ? -1 : Left(true, deadline));
}

// --- Connection ---

Connection::Connection(Socket s, std::string name, FrameHandler f, CloseHandler c)
    : sock_(std::move(s)), name_(std::move(name)), on_frame_(std::move(f)), on_close_(std::move(c)) {
  last_rx_ns_ = Clock::now().time_since_epoch().count();
}

std::shared_ptr<Connection> Connection::Start(Socket s, std::string name, FrameHandler on_frame,
                                              CloseHandler on_close) {
  std::shared_ptr<Connection> c(
      new Connection(std::move(s), std::move(name), std::move(on_frame), std::move(on_close)));
  // The threads keep the connection alive until they end; the last owner may then be one of
  // them, which is why the destructor detaches a thread that destroys its own connection.
  c->reader_ = std::thread([c] { c->ReaderLoop(); });
  c->sender_ = std::thread([c] { c->SenderLoop(); });
  return c;
}

Connection::~Connection() {
  Close();
  Join();
}

void Connection::Join() {
  const auto self = std::this_thread::get_id();
  for (std::thread* t : {&reader_, &sender_}) {
    if (!t->joinable()) continue;
    if (t->get_id() == self) {
      t->detach();
    } else {
      t->join();
    }
  }
}

std::chrono::steady_clock::time_point Connection::last_receive() const {
  return Clock::time_point(Clock::duration(last_rx_ns_.load()));
}

void Connection::SendFrame(std::vector<uint8_t> frame) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return;
    if (!sending_ && queue_.empty() && frame.size() <= kInlineSendBytes) {
      // Fast path for the per-token frame: send it from this thread now rather than waking the
      // sender thread (one thread wake-up less per stage boundary). A small frame fits the
      // socket buffer, so this does not block unless the peer stopped reading, and then the
      // heartbeat's Close() wakes it.
      sending_ = true;
      lock.unlock();
      Status st = sock_.SendFrame(frame);
      lock.lock();
      sending_ = false;
      cv_.notify_all();
      if (!st.ok()) {
        lock.unlock();
        Fail(st.WithContext(name_));
        return;
      }
      bytes_sent_ += frame.size();
      return;
    }
    queued_bytes_ += frame.size();
    queue_.push_back(std::move(frame));
  }
  cv_.notify_all();
}

void Connection::Close(const Status& why) { Fail(why); }

void Connection::Fail(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.exchange(true)) return;
    queue_.clear();
    queued_bytes_ = 0;
  }
  sock_.Shutdown();
  cv_.notify_all();
  std::call_once(close_once_, [&] {
    if (on_close_) on_close_(why);
  });
}

void Connection::ReaderLoop() {
  std::vector<uint8_t> payload;
  FrameHeader h;
  while (!closed_) {
    Status st = ReadFrame(sock_, &h, &payload, -1);
    if (!st.ok()) {
      if (!closed_) Fail(st.WithContext(name_));
      return;
    }
    bytes_received_ += kFrameHeaderBytes + payload.size();
    last_rx_ns_ = Clock::now().time_since_epoch().count();
    // No exception leaves this thread (it would end the process): a handler that throws (an
    // allocation refused, say) fails this connection instead.
    try {
      if (on_frame_) on_frame_(h.type, payload);
    } catch (const std::exception& e) {
      Fail(Status::Internal(name_ + ": handling a " + std::string(MsgTypeName(h.type)) + " frame failed: " + e.what()));
      return;
    }
  }
}

void Connection::SenderLoop() {
  std::vector<uint8_t> frame;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closed_ || (!queue_.empty() && !sending_); });
      if (closed_) return;
      frame = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= frame.size();
      sending_ = true;
    }
    Status st = sock_.SendFrame(frame);
    {
      std::lock_guard<std::mutex> lock(mu_);
      sending_ = false;
    }
    cv_.notify_all();
    if (!st.ok()) {
      Fail(st.WithContext(name_));
      return;
    }
    bytes_sent_ += frame.size();
  }
}

}  // namespace tandem::net
