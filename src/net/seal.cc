#include "net/seal.h"

#include <sodium.h>

#include <cstring>
#include <string>

namespace tandem::net {
namespace {

static_assert(crypto_aead_chacha20poly1305_IETF_ABYTES == kSealTagBytes);
static_assert(crypto_aead_chacha20poly1305_IETF_KEYBYTES == sizeof(SealKey));

std::array<uint8_t, crypto_aead_chacha20poly1305_IETF_NPUBBYTES> FrameNonce(uint64_t n) {
  std::array<uint8_t, crypto_aead_chacha20poly1305_IETF_NPUBBYTES> nonce{};
  for (int i = 0; i < 8; ++i) nonce[i] = static_cast<uint8_t>(n >> (8 * i));
  return nonce;
}

}  // namespace

void SealFrame(const SealKey& key, uint64_t number, std::span<const uint8_t> frame, std::vector<uint8_t>* out) {
  const size_t n = frame.size();
  out->resize(kFrameHeaderBytes + n + kSealTagBytes);
  const uint32_t len = static_cast<uint32_t>(n + kSealTagBytes);
  const uint16_t type = static_cast<uint16_t>(MsgType::kSealed), reserved = 0;
  uint8_t* o = out->data();
  std::memcpy(o, &len, 4);
  std::memcpy(o + 4, &type, 2);
  std::memcpy(o + 6, &reserved, 2);
  const auto nonce = FrameNonce(number);
  crypto_aead_chacha20poly1305_ietf_encrypt_detached(o + kFrameHeaderBytes, o + kFrameHeaderBytes + n, nullptr, frame.data(), n,
                                                     o, kFrameHeaderBytes, nullptr, nonce.data(), key.data());
}

Status OpenFrame(const SealKey& key, uint64_t number, std::span<const uint8_t, kFrameHeaderBytes> outer,
                 std::vector<uint8_t>* payload, FrameHeader* inner, uint32_t max_payload) {
  if (payload->size() < kSealOverheadBytes || payload->size() - kSealOverheadBytes > max_payload) {
    return Status::Corruption("Sealed frame of " + std::to_string(payload->size()) + " bytes where " +
                              std::to_string(kSealOverheadBytes) + " to " +
                              std::to_string(uint64_t{max_payload} + kSealOverheadBytes) + " are allowed");
  }
  const size_t n = payload->size() - kSealTagBytes;
  const auto nonce = FrameNonce(number);
  if (crypto_aead_chacha20poly1305_ietf_decrypt_detached(payload->data(), nullptr, payload->data(), n, payload->data() + n,
                                                         outer.data(), outer.size(), nonce.data(), key.data()) != 0) {
    return Status::Corruption("sealed frame " + std::to_string(number) +
                              " failed authentication: it was changed, dropped, replayed or reordered on the way, "
                              "or did not come from the peer");
  }
  TANDEM_ASSIGN_OR_RETURN(*inner, DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes>(payload->data(), kFrameHeaderBytes)));
  if (inner->payload_bytes != n - kFrameHeaderBytes || inner->type == static_cast<uint16_t>(MsgType::kSealed)) {
    return Status::Corruption("a sealed frame's inner header does not match its size");
  }
  payload->erase(payload->begin(), payload->begin() + kFrameHeaderBytes);
  payload->resize(inner->payload_bytes);
  return Status::Ok();
}

}  // namespace tandem::net
