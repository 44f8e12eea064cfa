// Sealed frames (protocol 4): one frame inside another, encrypted and authenticated with
// ChaCha20-Poly1305 (IETF). Pure functions over bytes; net/socket.h applies them to every frame
// of a connection whose handshake agreed keys (net/auth.h).
//
//   outer header  {u32 8 + n + 16, u16 Sealed, u16 0}     the AEAD's associated data
//   ciphertext    the inner frame: its 8-byte header and its n payload bytes
//   tag           16 bytes
//
// The nonce is the frame's number in its direction (u64 little-endian, then 4 zero bytes) and
// each direction has its own key, so no nonce is ever used twice with one key, and a frame that
// is changed, dropped, replayed, reordered or injected fails to open.
//
// Thread safety: functions without shared state.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "net/messages.h"

namespace tandem::net {

using SealKey = std::array<uint8_t, 32>;

// Seals `frame` (a whole inner frame, header first) as frame number `number` into *out.
void SealFrame(const SealKey& key, uint64_t number, std::span<const uint8_t> frame, std::vector<uint8_t>* out);

// Opens the payload of a Sealed frame whose header bytes were `outer` (already validated by
// DecodeFrameHeader) as frame number `number`. On success *inner is the inner header and
// *payload (the sealed payload on entry) becomes the inner payload. Corruption when the frame
// does not authenticate, its inner header is malformed or names a payload above `max_payload`.
Status OpenFrame(const SealKey& key, uint64_t number, std::span<const uint8_t, kFrameHeaderBytes> outer,
                 std::vector<uint8_t>* payload, FrameHeader* inner, uint32_t max_payload = kMaxPayloadBytes);

}  // namespace tandem::net
