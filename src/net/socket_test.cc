#include "net/socket.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "net/auth.h"

namespace tandem::net {
namespace {

Key KeyOf(uint8_t b) {
  Key k;
  k.fill(b);
  return k;
}

// Runs a worker-side handshake on one accepted connection; returns its outcome.
std::future<Status> ServeOnce(Listener& l, std::optional<Key> key, WorkerInfo info) {
  return std::async(std::launch::async, [&l, key, info] {
    Result<Socket> s = l.Accept(5000);
    if (!s.ok()) return s.status();
    Result<ServerHello> h = ServerHandshake(*s, key);
    if (!h.ok()) return h.status();
    return SendWelcome(*s, key, *h, info);
  });
}

TEST(SocketTest, HandshakeWithMatchingKey) {
  Result<Listener> l = Listener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto server = ServeOnce(*l, KeyOf(1), {"w", "avx2", 2, 100, 1.5f, false});
  Result<Socket> c = Socket::Connect("127.0.0.1", l->port(), 2000);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Result<WorkerInfo> info = ClientHandshake(*c, Role::kMainNode, KeyOf(1));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->name, "w");
  EXPECT_EQ(info->threads, 2u);
  EXPECT_TRUE(server.get().ok());
}

TEST(SocketTest, WrongKeyIsRefusedOnBothSides) {
  Result<Listener> l = Listener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  auto server = ServeOnce(*l, KeyOf(1), {});
  Result<Socket> c = Socket::Connect("127.0.0.1", l->port(), 2000);
  ASSERT_TRUE(c.ok());
  Result<WorkerInfo> info = ClientHandshake(*c, Role::kMainNode, KeyOf(2));
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.status().message().find("wrong key"), std::string::npos) << info.status().ToString();
  Status st = server.get();
  EXPECT_FALSE(st.ok());
}

TEST(SocketTest, KeyMismatchInPresenceIsRefused) {
  for (bool worker_has_key : {true, false}) {
    Result<Listener> l = Listener::Bind("127.0.0.1", 0);
    ASSERT_TRUE(l.ok());
    std::optional<Key> wk, ck;
    (worker_has_key ? wk : ck) = KeyOf(3);
    auto server = std::async(std::launch::async, [&] {
      Result<Socket> s = l->Accept(5000);
      if (s.ok()) (void)ServerHandshake(*s, wk, 2000);
    });
    Result<Socket> c = Socket::Connect("127.0.0.1", l->port(), 2000);
    ASSERT_TRUE(c.ok());
    Result<WorkerInfo> info = ClientHandshake(*c, Role::kMainNode, ck, 2000);
    ASSERT_FALSE(info.ok());
    EXPECT_NE(info.status().message().find("key"), std::string::npos) << info.status().ToString();
    c->Close();
    server.get();
  }
}

TEST(SocketTest, ConnectionDeliversFramesInOrderAndReportsClose) {
  Result<Listener> l = Listener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  auto accepted = std::async(std::launch::async, [&] { return l->Accept(5000); });
  Result<Socket> c = Socket::Connect("127.0.0.1", l->port(), 2000);
  ASSERT_TRUE(c.ok());
  Result<Socket> s = accepted.get();
  ASSERT_TRUE(s.ok());

  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> got;
  bool closed = false;
  Status why;
  auto conn = Connection::Start(
      std::move(*s), "peer",
      [&](uint16_t type, std::span<const uint8_t> payload) {
        ASSERT_EQ(type, static_cast<uint16_t>(MsgType::kPing));
        Result<Ping> p = Ping::Decode(payload);
        ASSERT_TRUE(p.ok());
        std::lock_guard<std::mutex> lock(mu);
        got.push_back(p->id);
        cv.notify_all();
      },
      [&](const Status& st) {
        std::lock_guard<std::mutex> lock(mu);
        closed = true;
        why = st;
        cv.notify_all();
      });
  auto out = Connection::Start(std::move(*c), "out", nullptr, nullptr);
  for (uint64_t i = 0; i < 100; ++i) out->Send(MsgType::kPing, Ping{i});
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return got.size() == 100; }));
  }
  for (uint64_t i = 0; i < 100; ++i) EXPECT_EQ(got[i], i);
  out->Close();
  out->Join();
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return closed; }));
  }
  EXPECT_FALSE(why.ok());
  EXPECT_NE(why.message().find("peer"), std::string::npos) << why.ToString();
  conn->Close();
  conn->Join();
}

TEST(SocketTest, OversizedFrameIsRejectedBeforeReadingIt) {
  Result<Listener> l = Listener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  auto accepted = std::async(std::launch::async, [&] { return l->Accept(5000); });
  Result<Socket> c = Socket::Connect("127.0.0.1", l->port(), 2000);
  ASSERT_TRUE(c.ok());
  Result<Socket> s = accepted.get();
  ASSERT_TRUE(s.ok());
  uint8_t header[8] = {0xff, 0xff, 0xff, 0x7f, 32, 0, 0, 0};
  ASSERT_TRUE(c->SendAll(header).ok());
  FrameHeader h;
  std::vector<uint8_t> payload;
  Status st = ReadFrame(*s, &h, &payload, 2000);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("exceeds the limit"), std::string::npos) << st.ToString();
  EXPECT_TRUE(payload.empty());
}

TEST(SocketTest, ParsesHostPort) {
  std::string h;
  uint16_t p = 0;
  ASSERT_TRUE(ParseHostPort("10.1.2.3:7000", 50052, &h, &p).ok());
  EXPECT_EQ(h, "10.1.2.3");
  EXPECT_EQ(p, 7000);
  ASSERT_TRUE(ParseHostPort("box", 50052, &h, &p).ok());
  EXPECT_EQ(p, 50052);
  ASSERT_TRUE(ParseHostPort("[::1]:9", 1, &h, &p).ok());
  EXPECT_EQ(h, "::1");
  EXPECT_FALSE(ParseHostPort("box:0", 1, &h, &p).ok());
  EXPECT_FALSE(ParseHostPort("box:x", 1, &h, &p).ok());
  EXPECT_TRUE(IsLoopbackHost("127.0.0.5"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
}

// A frame header as an unauthenticated client would write it: any size it likes.
std::vector<uint8_t> RawHeader(uint32_t payload_bytes, MsgType type) {
  std::vector<uint8_t> h(kFrameHeaderBytes, 0);
  for (int i = 0; i < 4; ++i) h[i] = static_cast<uint8_t>(payload_bytes >> (8 * i));
  h[4] = static_cast<uint8_t>(static_cast<uint16_t>(type));
  h[5] = static_cast<uint8_t>(static_cast<uint16_t>(type) >> 8);
  return h;
}

// Before authentication the worker reads each handshake message into exactly its size: a Hello
// header announcing 64 MiB is refused at once, before anything is allocated or read for it (main
// before this change resized its buffer to the announced size and waited for the bytes).
TEST(SocketTest, AnOversizedHandshakeFrameIsRefusedBeforeAllocation) {
  Result<Listener> l = Listener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  auto server = std::async(std::launch::async, [&] {
    Result<Socket> s = l->Accept(5000);
    if (!s.ok()) return s.status();
    return ServerHandshake(*s, KeyOf(1), 5000).status();
  });
  Result<Socket> c = Socket::Connect("127.0.0.1", l->port(), 2000);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->SendAll(RawHeader(64u << 20, MsgType::kHello)).ok());
  const auto t0 = std::chrono::steady_clock::now();
  Status st = server.get();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("where at most 71 are allowed"), std::string::npos) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "it waited for the payload";
}

// One deadline covers the whole handshake: a client that dribbles a byte every 112 ms finishes the
// 8-byte header just inside the timeout, and used to get a fresh timeout for the payload (ending
// near 1.8 s here); now the handshake ends at its one deadline.
TEST(SocketTest, ASlowHandshakeEndsAtOneDeadline) {
  Result<Listener> l = Listener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  const int timeout_ms = 1000;
  auto server = std::async(std::launch::async, [&] {
    Result<Socket> s = l->Accept(5000);
    if (!s.ok()) return s.status();
    return ServerHandshake(*s, KeyOf(1), timeout_ms).status();
  });
  Result<Socket> c = Socket::Connect("127.0.0.1", l->port(), 2000);
  ASSERT_TRUE(c.ok());
  Hello hello;
  std::vector<uint8_t> frame;
  EncodeFrame(MsgType::kHello, hello, &frame);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread dribble([&] {
    for (uint8_t b : frame) {
      if (!c->SendAll(std::span(&b, 1)).ok()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(112));
    }
  });
  Status st = server.get();
  const auto took = std::chrono::steady_clock::now() - t0;
  c->Shutdown();
  dribble.join();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("timed out"), std::string::npos) << st.ToString();
  EXPECT_LT(took, std::chrono::milliseconds(timeout_ms + 400)) << "the handshake outlived its deadline";
}

}  // namespace
}  // namespace tandem::net
