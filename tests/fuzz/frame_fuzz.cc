// libFuzzer target: the frame and message decoder of the wire protocol (net/messages.h).
// The input is a stream of frames as a worker reads them off a socket: each header is
// validated, then its payload decoded. Any input must give a status, never a crash, a
// sanitizer report or an allocation beyond the protocol's limits.
#include <cstddef>
#include <cstdint>
#include <span>

#include "net/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::net;
  std::span<const uint8_t> in(data, size);
  // Also decode the whole input as the payload of the type named by its first byte, so every
  // decoder is reached even without a valid header in front.
  if (!in.empty()) (void)ValidatePayload(static_cast<uint16_t>(in[0] < 60 ? in[0] : 32), in.subspan(1));
  while (in.size() >= kFrameHeaderBytes) {
    tandem::Result<FrameHeader> h = DecodeFrameHeader(in.first<kFrameHeaderBytes>());
    if (!h.ok()) break;
    in = in.subspan(kFrameHeaderBytes);
    if (h->payload_bytes > in.size()) break;
    (void)ValidatePayload(h->type, in.first(h->payload_bytes));
    in = in.subspan(h->payload_bytes);
  }
  return 0;
}
