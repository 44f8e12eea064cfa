// For tests only: a man in the middle that understands tandem's framing. It listens on loopback,
// forwards every connection to a target port, and passes each frame of each direction through a
// rule that may edit it, flip a bit, drop it or send it twice. Frames are seen as they travel:
// after a keyed handshake that is the Sealed envelope, whose contents the proxy cannot read.
//
// Thread safety: SetRule and the counters from any thread; rules run on the proxy's threads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "net/socket.h"

namespace tandem::testing {

class TamperProxy {
 public:
  enum class Action { kForward, kDrop, kTwice };
  // `frame` is the whole frame as it travels (8-byte header, then payload); a rule may edit it.
  using Rule = std::function<Action(size_t index, std::vector<uint8_t>& frame)>;

  explicit TamperProxy(uint16_t target_port) : target_(target_port) {
    Result<net::Listener> l = net::Listener::Bind("127.0.0.1", 0);
    if (!l.ok()) return;
    listener_ = std::move(*l);
    accept_ = std::thread([this] { AcceptLoop(); });
  }
  ~TamperProxy() {
    stop_ = true;
    if (accept_.joinable()) accept_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& s : sockets_) s->Shutdown();
    }
    for (std::thread& t : pumps_) t.join();
  }
  uint16_t port() const { return listener_.port(); }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port()); }

  // Rules for frames towards the target (the worker) and back; nullptr forwards everything.
  void SetRule(bool to_target, Rule r) {
    std::lock_guard<std::mutex> lock(mu_);
    (to_target ? to_target_ : from_target_) = std::move(r);
  }

 private:
  void AcceptLoop() {
    while (!stop_) {
      Result<net::Socket> c = listener_.Accept(100);
      if (!c.ok()) continue;
      Result<net::Socket> t = net::Socket::Connect("127.0.0.1", target_, 2000);
      if (!t.ok()) continue;
      auto client = std::make_shared<net::Socket>(std::move(*c));
      auto target = std::make_shared<net::Socket>(std::move(*t));
      std::lock_guard<std::mutex> lock(mu_);
      sockets_.push_back(client);
      sockets_.push_back(target);
      pumps_.emplace_back([this, client, target] { Pump(*client, *target, true); });
      pumps_.emplace_back([this, client, target] { Pump(*target, *client, false); });
    }
  }

  // Moves frames from `in` to `out` until either side ends, then ends both.
  void Pump(net::Socket& in, net::Socket& out, bool to_target) {
    std::vector<uint8_t> frame;
    for (size_t index = 0;; ++index) {
      frame.resize(net::kFrameHeaderBytes);
      if (!in.RecvAll(frame, -1).ok()) break;
      uint32_t n = 0;
      std::memcpy(&n, frame.data(), 4);
      if (n > net::kMaxPayloadBytes + net::kSealOverheadBytes) break;
      frame.resize(net::kFrameHeaderBytes + n);
      if (!in.RecvAll(std::span(frame).subspan(net::kFrameHeaderBytes), -1).ok()) break;
      Rule rule;
      {
        std::lock_guard<std::mutex> lock(mu_);
        rule = to_target ? to_target_ : from_target_;
      }
      const Action a = rule ? rule(index, frame) : Action::kForward;
      if (a == Action::kDrop) continue;
      if (!out.SendAll(frame).ok()) break;
      if (a == Action::kTwice && !out.SendAll(frame).ok()) break;
    }
    in.Shutdown();
    out.Shutdown();
  }

  uint16_t target_;
  net::Listener listener_;
  std::atomic<bool> stop_{false};
  std::thread accept_;
  std::mutex mu_;
  Rule to_target_, from_target_;
  std::vector<std::shared_ptr<net::Socket>> sockets_;
  std::vector<std::thread> pumps_;
};

}  // namespace tandem::testing
