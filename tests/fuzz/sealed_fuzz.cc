// libFuzzer target: sealed frames (net/seal.h), as a peer on a sealed connection reads them.
// The first input byte picks how the rest is used:
//   - even: as the raw bytes of a sealed connection, frame after frame, opened with a fixed key
//     and the running frame number: what a man in the middle can send. Nothing may crash, and
//     nothing the fuzzer makes without the key may open.
//   - odd: as plain frames (header and payload, as frame_fuzz reads them), each sealed with the
//     key and opened again, some with one byte changed (chosen by the input). Checked, not just
//     run: an untouched frame must open to exactly its bytes, a changed one must not open, and
//     every opened payload goes through the message decoders.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "net/messages.h"
#include "net/seal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::net;
  if (size == 0) return 0;
  SealKey key;
  key.fill(0x42);
  const bool seal_them = data[0] & 1;
  std::span<const uint8_t> in(data + 1, size - 1);
  std::vector<uint8_t> payload, sealed;
  FrameHeader inner;
  for (uint64_t number = 0; in.size() >= kFrameHeaderBytes; ++number) {
    tandem::Result<FrameHeader> h = DecodeFrameHeader(in.first<kFrameHeaderBytes>());
    if (!h.ok() || h->payload_bytes > in.size() - kFrameHeaderBytes) break;
    const std::span<const uint8_t> frame = in.first(kFrameHeaderBytes + h->payload_bytes);
    in = in.subspan(frame.size());
    if (!seal_them) {
      if (h->type != static_cast<uint16_t>(MsgType::kSealed)) break;
      payload.assign(frame.begin() + kFrameHeaderBytes, frame.end());
      // A forgery that opens would be a broken AEAD or a broken OpenFrame.
      if (OpenFrame(key, number, frame.first<kFrameHeaderBytes>(), &payload, &inner).ok()) std::abort();
      continue;
    }
    if (h->type == static_cast<uint16_t>(MsgType::kSealed)) continue;  // never nested
    SealFrame(key, number, frame, &sealed);
    // The byte after this frame (if any) says whether and where to change the sealed frame.
    const bool tamper = !in.empty() && (in[0] & 1);
    if (tamper) sealed[(in[0] * 131u + frame.size()) % sealed.size()] ^= static_cast<uint8_t>(1u << (in[0] % 8));
    std::array<uint8_t, kFrameHeaderBytes> outer;
    std::memcpy(outer.data(), sealed.data(), outer.size());
    tandem::Result<FrameHeader> oh = DecodeFrameHeader(outer);
    if (!oh.ok() || oh->payload_bytes != sealed.size() - kFrameHeaderBytes) {
      if (!tamper) std::abort();  // a frame we sealed must have a valid outer header
      continue;
    }
    payload.assign(sealed.begin() + kFrameHeaderBytes, sealed.end());
    tandem::Status st = OpenFrame(key, number, outer, &payload, &inner);
    if (tamper == st.ok()) std::abort();  // changed yet opened, or untouched yet refused
    if (!st.ok()) continue;
    if (inner.type != h->type || payload.size() != h->payload_bytes ||
        !std::equal(payload.begin(), payload.end(), frame.begin() + kFrameHeaderBytes)) {
      std::abort();
    }
    (void)ValidatePayload(inner.type, payload);
  }
  return 0;
}
