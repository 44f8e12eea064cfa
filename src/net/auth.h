// The connection handshake: protocol version check, pre-shared-key authentication and session
// keys (protocol 4).
//
//   client -> Hello{magic, version, role, client nonce, client ephemeral X25519 key}
//   worker -> Challenge{version, auth required, worker nonce, worker ephemeral X25519 key}
//             (or Refused)
//   client -> Auth{HMAC-SHA256(K, "tandem-v4 client" | T)}
//   worker -> Welcome{HMAC-SHA256(K, "tandem-v4 worker" | T | info), info}
//             or Refused{reason}, then close
//
// T, the transcript, is BLAKE2b-256 over the Hello and Challenge payloads as sent: both proofs
// cover the roles, nonces and ephemeral keys, and the worker's proof covers its WorkerInfo too, so
// nothing of the handshake can be edited in transit. With a key, both sides then derive one key
// per direction, BLAKE2b-256 keyed with K over ("tandem-v4 c2s" or "s2c" | X25519 shared secret
// | T), and seal every later frame (net/socket.h). The ephemeral secrets are erased once used, so
// traffic recorded today stays private if K leaks later (forward secrecy); a man in the middle
// without K can neither finish the handshake nor compute the session keys.
//
// A client that holds a key refuses a worker that asks for none (no silent downgrade). Without a
// key on both sides the proofs are zeros, unchecked, and frames travel in the clear: use that only
// on a trusted network (the worker refuses to listen beyond loopback without a key unless told).
// The key is the BLAKE2b-256 of the key file's contents (trailing newlines ignored), which must be
// at least 32 bytes of random data: a key is never derived from a short passphrase, which a
// recorded handshake would let anyone attack offline.
//
// Thread safety: functions without shared state; the Key is immutable.
#pragma once

#include <optional>
#include <string>

#include "base/status.h"
#include "net/messages.h"
#include "net/socket.h"

namespace tandem::net {

using Key = std::array<uint8_t, 32>;

// Writes a new key file (32 random bytes, base64, mode 0600); refuses to replace a file.
Status WriteNewKeyFile(const std::string& path);
// Reads a key file (at least kMinKeyFileBytes of secret, any bytes). InvalidArgument when
// shorter, with how to make one (`tandem keygen`).
inline constexpr size_t kMinKeyFileBytes = 32;
Result<Key> LoadKeyFile(const std::string& path);

inline constexpr int kHandshakeTimeoutMs = 5000;

// Client side; returns what the worker reported about itself. With a key, `s` is sealed on
// success.
Result<WorkerInfo> ClientHandshake(Socket& s, Role role, const std::optional<Key>& key,
                                   int timeout_ms = kHandshakeTimeoutMs);

// Worker side, up to and including the check of the client's proof. On success the caller
// decides whether to accept (SendWelcome, which seals `s` when there is a key) or refuse
// (SendRefused) the authenticated client.
struct ServerHello {
  Role role = Role::kMainNode;
  Digest transcript{};
  std::optional<SessionKeys> keys;  // with a key: the session keys, from this side
};
Result<ServerHello> ServerHandshake(Socket& s, const std::optional<Key>& key,
                                    int timeout_ms = kHandshakeTimeoutMs);
Status SendWelcome(Socket& s, const std::optional<Key>& key, const ServerHello& h,
                   const WorkerInfo& info);
Status SendRefused(Socket& s, const std::string& reason);

}  // namespace tandem::net
