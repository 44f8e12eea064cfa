// The connection handshake: protocol version check and pre-shared-key authentication.
//
//   client -> Hello{magic, version, role, client nonce}
//   worker -> Challenge{version, auth required, worker nonce}      (or Refused)
//   client -> Auth{HMAC-SHA256(key, "tandem-v1 client" | role | client nonce | worker nonce)}
//   worker -> Welcome{HMAC-SHA256(key, "tandem-v1 worker" | client nonce | worker nonce), info}
//             or Refused{reason}, then close
//
// The key never crosses the wire; both sides prove they hold it, with fresh random nonces so a
// recorded exchange cannot be replayed. A client that holds a key refuses a worker that asks for
// none (no silent downgrade). Without a key on both sides the MACs are zeros and unchecked.
// The key is the BLAKE2b-256 of the key file's contents (trailing newlines ignored).
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

// Reads a key file (at least 16 bytes of secret, any bytes). InvalidArgument when shorter.
Result<Key> LoadKeyFile(const std::string& path);

inline constexpr int kHandshakeTimeoutMs = 5000;

// Client side; returns what the worker reported about itself.
Result<WorkerInfo> ClientHandshake(Socket& s, Role role, const std::optional<Key>& key,
                                   int timeout_ms = kHandshakeTimeoutMs);

// Worker side, up to and including the check of the client's proof. On success the caller
// decides whether to accept (SendWelcome) or refuse (SendRefused) the authenticated client.
struct ServerHello {
  Role role = Role::kMainNode;
  Nonce client_nonce{}, server_nonce{};
};
Result<ServerHello> ServerHandshake(Socket& s, const std::optional<Key>& key,
                                    int timeout_ms = kHandshakeTimeoutMs);
Status SendWelcome(Socket& s, const std::optional<Key>& key, const ServerHello& h,
                   const WorkerInfo& info);
Status SendRefused(Socket& s, const std::string& reason);

}  // namespace tandem::net
