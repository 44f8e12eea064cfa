// TCP sockets with timeouts, and framed connections.
//
// Socket and Listener are thin owners of POSIX descriptors: connect and accept take timeouts,
// every socket has TCP_NODELAY (one small frame per token must leave at once) and keep-alive.
// ReadFrame/WriteFrame move one frame (net/protocol.h) and validate its header before reading
// the payload, so a peer cannot make us allocate more than kMaxPayloadBytes.
//
// Connection runs one framed socket with its own reader thread and sender thread, so network
// I/O overlaps compute: Send() queues a frame and returns; frames leave in order. A small frame
// with nothing queued before it is written by the calling thread at once (no wake-up). The reader
// calls on_frame for each frame and on_close once, with the reason, when the socket fails, the
// peer closes, a frame is malformed or Close() is called. Both threads sleep while idle.
//
// Sealing: after a handshake with a key (net/auth.h) both sides call EnableSealing with the
// session keys it agreed. From then on every frame this socket sends (SendFrame, WriteMessage,
// Connection) travels as a Sealed frame and every frame it reads must be one:
//
//   outer header  {u32 8 + n + 16, u16 Sealed, u16 0}           (the AEAD's associated data)
//   ciphertext    of the inner frame: its 8-byte header and n payload bytes
//   tag           16 bytes (ChaCha20-Poly1305, IETF)
//
// with a separate key per direction and the frame's number in its direction (0, 1, 2, ...) as the
// nonce, so a changed, dropped, replayed, reordered or injected frame fails to open and the
// connection ends with that error.
//
// Why not Asio: its synchronous API has no timeouts, and two blocking threads per connection
// are all tandem needs (a handful of connections per process); the POSIX layer is ~200 lines.
//
// Thread safety: Socket/Listener: one thread at a time, except that one thread may send (SendAll,
// SendFrame) while another receives (RecvAll, ReadFrame): the sealing state is per direction.
// Connection: Send(), Close() and the
// counters may be called from any thread; callbacks run on the reader thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "net/messages.h"

namespace tandem::net {

// The keys a handshake agreed: one per direction.
struct SessionKeys {
  std::array<uint8_t, 32> send{}, receive{};
};

class Socket {
 public:
  Socket();
  explicit Socket(int fd);
  Socket(Socket&& o) noexcept;
  Socket& operator=(Socket&& o) noexcept;
  ~Socket();

  // Resolves host (name or address) and connects within timeout_ms.
  static Result<Socket> Connect(const std::string& host, uint16_t port, int timeout_ms);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Sends every byte (blocking). IOError when the peer is gone.
  Status SendAll(std::span<const uint8_t> bytes);
  // Sends one whole frame (header and payload, see EncodeFrame), sealed once sealing is on.
  Status SendFrame(std::span<const uint8_t> frame);
  // Seals every frame from now on, in both directions (see above). Call once, after the
  // handshake, before any other frame is sent or read.
  void EnableSealing(const SessionKeys& keys);
  bool sealed() const { return seal_ != nullptr; }
  // Receives exactly bytes.size() bytes; timeout_ms < 0 waits forever. IOError on EOF/timeout.
  Status RecvAll(std::span<uint8_t> bytes, int timeout_ms);
  // Wakes a thread blocked in RecvAll/SendAll (they then fail); the descriptor stays open.
  void Shutdown();
  // Makes close() send a reset instead of a graceful FIN (for tests of abrupt failures).
  void SetLingerZero();
  void Close();
  // "host:port" of the peer, for messages.
  std::string PeerName() const;

 private:
  friend Status ReadFrame(Socket&, FrameHeader*, std::vector<uint8_t>*, int, uint32_t);
  struct Sealing;
  int fd_ = -1;
  std::unique_ptr<Sealing> seal_;
};

class Listener {
 public:
  // Binds and listens; port 0 picks a free port (see port()).
  static Result<Listener> Bind(const std::string& host, uint16_t port);
  Listener() = default;
  Listener(Listener&&) = default;
  Listener& operator=(Listener&&) = default;
  uint16_t port() const { return port_; }
  // Waits up to timeout_ms for a connection; NotFound on timeout.
  Result<Socket> Accept(int timeout_ms);
  void Close() { sock_.Close(); }

 private:
  Socket sock_;
  uint16_t port_ = 0;
};

// True when `host` is a loopback name or address (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(const std::string& host);
// Parses "HOST:PORT" (or "[v6]:PORT"); a missing port gives default_port.
Status ParseHostPort(const std::string& s, uint16_t default_port, std::string* host, uint16_t* port);

// Reads one frame within `timeout_ms` (header and payload together; -1: no deadline): header
// validated, a payload above `max_payload` refused before anything is allocated, then the
// payload into `payload` (resized). On a sealed socket the frame must be Sealed and open with
// the next number; *h and *payload are then the inner frame's.
Status ReadFrame(Socket& s, FrameHeader* h, std::vector<uint8_t>* payload, int timeout_ms,
                 uint32_t max_payload = kMaxPayloadBytes);
// Sends a message as one frame.
template <typename M>
Status WriteMessage(Socket& s, MsgType t, const M& m) {
  std::vector<uint8_t> frame;
  EncodeFrame(t, m, &frame);
  return s.SendFrame(frame);
}
// Reads one frame that must be of type `t` and decodes it. A Refused frame becomes its reason
// as a status; an Error frame becomes its status.
template <typename M>
Result<M> ReadMessage(Socket& s, MsgType t, int timeout_ms, uint32_t max_payload = kMaxPayloadBytes);

class Connection {
 public:
  using FrameHandler = std::function<void(uint16_t type, std::span<const uint8_t> payload)>;
  using CloseHandler = std::function<void(const Status& why)>;

  // Takes the socket and starts the threads. `name` identifies the peer in messages.
  static std::shared_ptr<Connection> Start(Socket s, std::string name, FrameHandler on_frame,
                                           CloseHandler on_close);
  ~Connection();

  // Queues a whole frame (see EncodeFrame). Dropped when the connection is closed.
  void SendFrame(std::vector<uint8_t> frame);
  template <typename M>
  void Send(MsgType t, const M& m) {
    std::vector<uint8_t> f;
    EncodeFrame(t, m, &f);
    SendFrame(std::move(f));
  }
  // Closes the socket; on_close runs (once) with `why` unless it already ran.
  void Close(const Status& why = Status::Ok());
  // Waits until both threads have finished. Call Close() first; never from a callback.
  void Join();

  const std::string& name() const { return name_; }
  bool closed() const { return closed_.load(); }
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  uint64_t bytes_received() const { return bytes_received_.load(); }
  // Bytes of frames queued and not yet sent (for senders that pace themselves).
  uint64_t queued_bytes() const { return queued_bytes_.load(); }
  // When the last frame arrived.
  std::chrono::steady_clock::time_point last_receive() const;

 private:
  Connection(Socket s, std::string name, FrameHandler f, CloseHandler c);
  void ReaderLoop();
  void SenderLoop();
  void Fail(const Status& why);

  Socket sock_;
  std::string name_;
  FrameHandler on_frame_;
  CloseHandler on_close_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<uint8_t>> queue_;
  bool sending_ = false;  // a frame is being written (by the sender or inline); guarded by mu_
  static constexpr size_t kInlineSendBytes = 64 * 1024;
  std::atomic<bool> closed_{false};
  std::once_flag close_once_;
  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0}, queued_bytes_{0};
  std::atomic<int64_t> last_rx_ns_{0};
  std::thread reader_, sender_;
};

// --- template definitions ---

template <typename M>
Result<M> ReadMessage(Socket& s, MsgType t, int timeout_ms, uint32_t max_payload) {
  FrameHeader h;
  std::vector<uint8_t> payload;
  TANDEM_RETURN_IF_ERROR(ReadFrame(s, &h, &payload, timeout_ms, max_payload));
  if (h.type == static_cast<uint16_t>(MsgType::kRefused)) {
    Result<Refused> r = Refused::Decode(payload);
    if (!r.ok()) return r.status();
    return Status(Code::kInvalidArgument, "refused: " + r->reason);
  }
  if (h.type == static_cast<uint16_t>(MsgType::kError)) {
    Result<ErrorMsg> e = ErrorMsg::Decode(payload);
    if (!e.ok()) return e.status();
    return e->ToStatus();
  }
  if (h.type != static_cast<uint16_t>(t)) {
    return Status::Corruption("expected a " + std::string(MsgTypeName(static_cast<uint16_t>(t))) +
                              " frame, got " + std::string(MsgTypeName(h.type)));
  }
  return M::Decode(payload);
}

}  // namespace tandem::net
