#include "net/auth.h"

#include <sodium.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>

namespace tandem::net {
namespace {

Mac Hmac(const Key& key, std::string_view label, std::initializer_list<std::span<const uint8_t>> parts) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key.data(), key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const uint8_t*>(label.data()), label.size());
  for (std::span<const uint8_t> p : parts) crypto_auth_hmacsha256_update(&st, p.data(), p.size());
  Mac out;
  crypto_auth_hmacsha256_final(&st, out.data());
  return out;
}

Mac ClientMac(const Key& key, Role role, const Nonce& c, const Nonce& s) {
  const uint8_t r = static_cast<uint8_t>(role);
  return Hmac(key, "tandem-v1 client", {std::span<const uint8_t>(&r, 1), c, s});
}

Mac WorkerMac(const Key& key, const Nonce& c, const Nonce& s) {
  return Hmac(key, "tandem-v1 worker", {c, s});
}

// The payload size of a fixed-size message.
template <typename M>
uint32_t EncodedBytes(const M& m) {
  std::vector<uint8_t> out;
  Writer w(&out);
  m.Encode(w);
  return static_cast<uint32_t>(out.size());
}

// Welcome (two short strings) or the Refused that may come instead.
constexpr uint32_t kMaxWelcomeBytes = 3 * kMaxStringBytes;

Status InitSodium() {
  if (sodium_init() < 0) return Status::Internal("libsodium failed to initialise");
  return Status::Ok();
}

}  // namespace

Result<Key> LoadKeyFile(const std::string& path) {
  TANDEM_RETURN_IF_ERROR(InitSodium());
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read key file " + path);
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (secret.size() > (1u << 20)) return Status::InvalidArgument("key file " + path + " is larger than 1 MiB");
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.size() < 16) {
    return Status::InvalidArgument("key file " + path + " holds " + std::to_string(secret.size()) +
                                   " bytes; use at least 16 random bytes (e.g. `head -c 32 /dev/urandom | base64 > key`)");
  }
  Key k;
  crypto_generichash(k.data(), k.size(), reinterpret_cast<const uint8_t*>(secret.data()), secret.size(), nullptr, 0);
  sodium_memzero(secret.data(), secret.size());
  return k;
}

Result<WorkerInfo> ClientHandshake(Socket& s, Role role, const std::optional<Key>& key, int timeout_ms) {
  TANDEM_RETURN_IF_ERROR(InitSodium());
  Hello hello;
  hello.role = role;
  randombytes_buf(hello.nonce.data(), hello.nonce.size());
  TANDEM_RETURN_IF_ERROR(WriteMessage(s, MsgType::kHello, hello));
  TANDEM_ASSIGN_OR_RETURN(Challenge ch, ReadMessage<Challenge>(s, MsgType::kChallenge, timeout_ms, kMaxWelcomeBytes));
  if (ch.version != kProtocolVersion) {
    return Status::Unsupported("worker speaks protocol version " + std::to_string(ch.version) +
                               ", this tandem speaks " + std::to_string(kProtocolVersion));
  }
  if (ch.auth_required && !key) {
    return Status::InvalidArgument("the worker requires a key; pass the same --auth-key-file as the worker");
  }
  if (!ch.auth_required && key) {
    return Status::InvalidArgument("the worker does not ask for a key but one was given; refusing an unauthenticated worker (start it with the same --auth-key-file)");
  }
  Auth auth;
  if (key) auth.mac = ClientMac(*key, role, hello.nonce, ch.nonce);
  TANDEM_RETURN_IF_ERROR(WriteMessage(s, MsgType::kAuth, auth));
  TANDEM_ASSIGN_OR_RETURN(Welcome w, ReadMessage<Welcome>(s, MsgType::kWelcome, timeout_ms, kMaxWelcomeBytes));
  if (key) {
    const Mac want = WorkerMac(*key, hello.nonce, ch.nonce);
    if (sodium_memcmp(want.data(), w.proof.data(), want.size()) != 0) {
      return Status::InvalidArgument("the worker failed to prove it holds the key");
    }
  }
  return w.info;
}

Result<ServerHello> ServerHandshake(Socket& s, const std::optional<Key>& key, int timeout_ms) {
  TANDEM_RETURN_IF_ERROR(InitSodium());
  // One deadline for the whole handshake, and each message read into exactly its size: nothing
  // an unauthenticated client sends can hold this thread longer or make it allocate more.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto left = [&] {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    return static_cast<int>(std::max<int64_t>(ms, 0));
  };
  TANDEM_ASSIGN_OR_RETURN(Hello hello, ReadMessage<Hello>(s, MsgType::kHello, left(), EncodedBytes(Hello{})));
  if (hello.version != kProtocolVersion) {
    const std::string why = "client speaks protocol version " + std::to_string(hello.version) +
                            ", this worker speaks " + std::to_string(kProtocolVersion);
    (void)SendRefused(s, why);
    return Status::Unsupported(why);
  }
  ServerHello h;
  h.role = hello.role;
  h.client_nonce = hello.nonce;
  Challenge ch;
  ch.auth_required = key.has_value();
  randombytes_buf(ch.nonce.data(), ch.nonce.size());
  h.server_nonce = ch.nonce;
  TANDEM_RETURN_IF_ERROR(WriteMessage(s, MsgType::kChallenge, ch));
  TANDEM_ASSIGN_OR_RETURN(Auth auth, ReadMessage<Auth>(s, MsgType::kAuth, left(), EncodedBytes(Auth{})));
  if (key) {
    const Mac want = ClientMac(*key, h.role, h.client_nonce, h.server_nonce);
    if (sodium_memcmp(want.data(), auth.mac.data(), want.size()) != 0) {
      (void)SendRefused(s, "authentication failed (wrong key)");
      return Status::InvalidArgument("authentication failed (wrong key)");
    }
  }
  return h;
}

Status SendWelcome(Socket& s, const std::optional<Key>& key, const ServerHello& h, const WorkerInfo& info) {
  Welcome w;
  if (key) w.proof = WorkerMac(*key, h.client_nonce, h.server_nonce);
  w.info = info;
  return WriteMessage(s, MsgType::kWelcome, w);
}

Status SendRefused(Socket& s, const std::string& reason) {
  return WriteMessage(s, MsgType::kRefused, Refused{reason});
}

}  // namespace tandem::net
