#include "net/auth.h"

#include <fcntl.h>
#include <sodium.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
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

Digest Transcript(std::span<const uint8_t> hello, std::span<const uint8_t> challenge) {
  static constexpr std::string_view kLabel = "tandem-v4 transcript";
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, kDigestBytes);
  crypto_generichash_update(&st, reinterpret_cast<const uint8_t*>(kLabel.data()), kLabel.size());
  const uint32_t lens[2] = {static_cast<uint32_t>(hello.size()), static_cast<uint32_t>(challenge.size())};
  crypto_generichash_update(&st, reinterpret_cast<const uint8_t*>(lens), sizeof lens);
  crypto_generichash_update(&st, hello.data(), hello.size());
  crypto_generichash_update(&st, challenge.data(), challenge.size());
  Digest d;
  crypto_generichash_final(&st, d.data(), d.size());
  return d;
}

Mac ClientProof(const Key& key, const Digest& t) { return Hmac(key, "tandem-v4 client", {t}); }
Mac WorkerProof(const Key& key, const Digest& t, std::span<const uint8_t> info) {
  return Hmac(key, "tandem-v4 worker", {t, info});
}

// A fresh X25519 key pair for one connection; the secret half is erased by its destructor.
struct Ephemeral {
  PublicKey pk{};
  std::array<uint8_t, crypto_kx_SECRETKEYBYTES> sk{};
  Ephemeral() { crypto_kx_keypair(pk.data(), sk.data()); }
  ~Ephemeral() { sodium_memzero(sk.data(), sk.size()); }
  Ephemeral(const Ephemeral&) = delete;
  Ephemeral& operator=(const Ephemeral&) = delete;
};
static_assert(crypto_kx_PUBLICKEYBYTES == kPublicKeyBytes);

// The session keys from this side's ephemeral secret, the peer's public key, K and T.
Result<SessionKeys> DeriveKeys(const Key& key, const Ephemeral& mine, const PublicKey& theirs, const Digest& t,
                               bool client) {
  std::array<uint8_t, crypto_scalarmult_BYTES> shared{};
  if (crypto_scalarmult(shared.data(), mine.sk.data(), theirs.data()) != 0) {
    return Status::InvalidArgument("the peer's ephemeral key is not a valid X25519 key");
  }
  auto derive = [&](std::string_view label) {
    std::array<uint8_t, 32> k{};
    crypto_generichash_state st;
    crypto_generichash_init(&st, key.data(), key.size(), k.size());
    crypto_generichash_update(&st, reinterpret_cast<const uint8_t*>(label.data()), label.size());
    crypto_generichash_update(&st, shared.data(), shared.size());
    crypto_generichash_update(&st, t.data(), t.size());
    crypto_generichash_final(&st, k.data(), k.size());
    return k;
  };
  SessionKeys keys;
  const auto c2s = derive("tandem-v4 c2s"), s2c = derive("tandem-v4 s2c");
  keys.send = client ? c2s : s2c;
  keys.receive = client ? s2c : c2s;
  sodium_memzero(shared.data(), shared.size());
  return keys;
}

// The payload size of a fixed-size message.
template <typename M>
uint32_t EncodedBytes(const M& m) {
  return static_cast<uint32_t>(EncodePayload(m).size());
}

// Reads one frame of type `t` (a Refused one becomes its reason) and keeps its payload.
Status ReadRaw(Socket& s, MsgType t, int timeout_ms, uint32_t max_payload, std::vector<uint8_t>* payload) {
  FrameHeader h;
  TANDEM_RETURN_IF_ERROR(ReadFrame(s, &h, payload, timeout_ms, max_payload));
  if (h.type == static_cast<uint16_t>(MsgType::kRefused)) {
    Result<Refused> r = Refused::Decode(*payload);
    if (!r.ok()) return r.status();
    return Status(Code::kInvalidArgument, "refused: " + r->reason);
  }
  if (h.type != static_cast<uint16_t>(t)) {
    return Status::Corruption("expected a " + std::string(MsgTypeName(static_cast<uint16_t>(t))) + " frame, got " +
                              std::string(MsgTypeName(h.type)));
  }
  return Status::Ok();
}

// Welcome (two short strings) or the Refused that may come instead.
constexpr uint32_t kMaxWelcomeBytes = 3 * kMaxStringBytes;

Status InitSodium() {
  if (sodium_init() < 0) return Status::Internal("libsodium failed to initialise");
  return Status::Ok();
}

}  // namespace

Status WriteNewKeyFile(const std::string& path) {
  TANDEM_RETURN_IF_ERROR(InitSodium());
  std::array<uint8_t, 32> secret;
  randombytes_buf(secret.data(), secret.size());
  char text[sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_ORIGINAL)];
  sodium_bin2base64(text, sizeof text, secret.data(), secret.size(), sodium_base64_VARIANT_ORIGINAL);
  sodium_memzero(secret.data(), secret.size());
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Status::IOError("cannot create " + path + ": " + std::strerror(errno) +
                           (errno == EEXIST ? " (a key file is never replaced; remove it first)" : ""));
  }
  std::string line = std::string(text) + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  sodium_memzero(line.data(), line.size());
  sodium_memzero(text, sizeof text);
  if (::close(fd) != 0 || !ok) return Status::IOError("cannot write " + path);
  return Status::Ok();
}

Result<Key> LoadKeyFile(const std::string& path) {
  TANDEM_RETURN_IF_ERROR(InitSodium());
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read key file " + path);
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (secret.size() > (1u << 20)) return Status::InvalidArgument("key file " + path + " is larger than 1 MiB");
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.size() < kMinKeyFileBytes) {
    const size_t n = secret.size();
    sodium_memzero(secret.data(), secret.size());
    return Status::InvalidArgument("key file " + path + " holds " + std::to_string(n) + " bytes; a key must be at least " +
                                   std::to_string(kMinKeyFileBytes) +
                                   " random bytes (make one with `tandem keygen -o FILE` and copy it to every machine)");
  }
  Key k;
  crypto_generichash(k.data(), k.size(), reinterpret_cast<const uint8_t*>(secret.data()), secret.size(), nullptr, 0);
  sodium_memzero(secret.data(), secret.size());
  return k;
}

Result<WorkerInfo> ClientHandshake(Socket& s, Role role, const std::optional<Key>& key, int timeout_ms) {
  TANDEM_RETURN_IF_ERROR(InitSodium());
  Ephemeral eph;
  Hello hello;
  hello.role = role;
  randombytes_buf(hello.nonce.data(), hello.nonce.size());
  hello.ephemeral = eph.pk;
  const std::vector<uint8_t> hello_bytes = EncodePayload(hello);
  TANDEM_RETURN_IF_ERROR(WriteMessage(s, MsgType::kHello, hello));
  std::vector<uint8_t> ch_bytes;
  TANDEM_RETURN_IF_ERROR(ReadRaw(s, MsgType::kChallenge, timeout_ms, kMaxWelcomeBytes, &ch_bytes));
  // The version first, so an older worker's Challenge is named as such rather than malformed.
  if (ch_bytes.size() >= 2) {
    uint16_t version = 0;
    std::memcpy(&version, ch_bytes.data(), 2);
    if (version != kProtocolVersion) {
      return Status::Unsupported("worker speaks protocol version " + std::to_string(version) + ", this tandem speaks " +
                                 std::to_string(kProtocolVersion));
    }
  }
  TANDEM_ASSIGN_OR_RETURN(Challenge ch, Challenge::Decode(ch_bytes));
  if (ch.auth_required && !key) {
    return Status::InvalidArgument("the worker requires a key; pass the same --auth-key-file as the worker");
  }
  if (!ch.auth_required && key) {
    return Status::InvalidArgument("the worker does not ask for a key but one was given; refusing an unauthenticated worker (start it with the same --auth-key-file)");
  }
  const Digest t = Transcript(hello_bytes, ch_bytes);
  Auth auth;
  if (key) auth.mac = ClientProof(*key, t);
  TANDEM_RETURN_IF_ERROR(WriteMessage(s, MsgType::kAuth, auth));
  std::vector<uint8_t> welcome_bytes;
  TANDEM_RETURN_IF_ERROR(ReadRaw(s, MsgType::kWelcome, timeout_ms, kMaxWelcomeBytes, &welcome_bytes));
  TANDEM_ASSIGN_OR_RETURN(Welcome w, Welcome::Decode(welcome_bytes));
  if (key) {
    const Mac want = WorkerProof(*key, t, std::span(welcome_bytes).subspan(kMacBytes));
    if (sodium_memcmp(want.data(), w.proof.data(), want.size()) != 0) {
      return Status::InvalidArgument("the worker failed to prove it holds the key, or its handshake was changed on the way");
    }
    TANDEM_ASSIGN_OR_RETURN(SessionKeys keys, DeriveKeys(*key, eph, ch.ephemeral, t, /*client=*/true));
    s.EnableSealing(keys);
    sodium_memzero(&keys, sizeof keys);
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
  std::vector<uint8_t> hello_bytes;
  TANDEM_RETURN_IF_ERROR(ReadRaw(s, MsgType::kHello, left(), EncodedBytes(Hello{}), &hello_bytes));
  // The version before the rest, so an older client hears why.
  if (hello_bytes.size() >= 6) {
    uint16_t version = 0;
    std::memcpy(&version, hello_bytes.data() + 4, 2);
    if (version != kProtocolVersion) {
      const std::string why = "client speaks protocol version " + std::to_string(version) + ", this worker speaks " +
                              std::to_string(kProtocolVersion);
      (void)SendRefused(s, why);
      return Status::Unsupported(why);
    }
  }
  TANDEM_ASSIGN_OR_RETURN(Hello hello, Hello::Decode(hello_bytes));
  if (hello.version != kProtocolVersion) {
    const std::string why = "client speaks protocol version " + std::to_string(hello.version) +
                            ", this worker speaks " + std::to_string(kProtocolVersion);
    (void)SendRefused(s, why);
    return Status::Unsupported(why);
  }
  Ephemeral eph;
  Challenge ch;
  ch.auth_required = key.has_value();
  randombytes_buf(ch.nonce.data(), ch.nonce.size());
  ch.ephemeral = eph.pk;
  const std::vector<uint8_t> ch_bytes = EncodePayload(ch);
  TANDEM_RETURN_IF_ERROR(WriteMessage(s, MsgType::kChallenge, ch));
  ServerHello h;
  h.role = hello.role;
  h.transcript = Transcript(hello_bytes, ch_bytes);
  TANDEM_ASSIGN_OR_RETURN(Auth auth, ReadMessage<Auth>(s, MsgType::kAuth, left(), EncodedBytes(Auth{})));
  if (key) {
    const Mac want = ClientProof(*key, h.transcript);
    if (sodium_memcmp(want.data(), auth.mac.data(), want.size()) != 0) {
      (void)SendRefused(s, "authentication failed (wrong key)");
      return Status::InvalidArgument("authentication failed (wrong key)");
    }
    TANDEM_ASSIGN_OR_RETURN(SessionKeys keys, DeriveKeys(*key, eph, hello.ephemeral, h.transcript, /*client=*/false));
    h.keys = keys;
    sodium_memzero(&keys, sizeof keys);
  }
  return h;
}

Status SendWelcome(Socket& s, const std::optional<Key>& key, const ServerHello& h, const WorkerInfo& info) {
  Welcome w;
  w.info = info;
  if (key) {
    w.proof = WorkerProof(*key, h.transcript, EncodePayload(info));
  }
  TANDEM_RETURN_IF_ERROR(WriteMessage(s, MsgType::kWelcome, w));
  if (key) {
    if (!h.keys) return Status::Internal("a keyed handshake without session keys");
    s.EnableSealing(*h.keys);
  }
  return Status::Ok();
}

Status SendRefused(Socket& s, const std::string& reason) {
  return WriteMessage(s, MsgType::kRefused, Refused{reason});
}

}  // namespace tandem::net
