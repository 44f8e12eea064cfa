// The tandem wire protocol: frame layout, message ids and hard limits, in one place that both the
// encoder and the decoder use. docs/protocol.md describes the same protocol in prose.
//
// A frame is an 8-byte header followed by a payload:
//
//   u32 payload_bytes   little-endian, at most kMaxPayloadBytes
//   u16 message type    one of MsgType
//   u16 reserved        must be 0
//
// Every field of every payload is little-endian with an explicit width; no struct is ever sent as
// raw memory and no pointer crosses the wire. Message ids are pinned: never renumber one, only add.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem::net {

inline constexpr uint32_t kMagic = 0x4D444E54;  // "TNDM" as little-endian bytes
inline constexpr uint16_t kProtocolVersion = 8;
inline constexpr uint16_t kDefaultPort = 50052;  // as llama.cpp's rpc-server

inline constexpr size_t kFrameHeaderBytes = 8;
// Largest payload of any frame: a 512-token micro-batch of an 8192-wide model in f32 is 16 MiB.
inline constexpr uint32_t kMaxPayloadBytes = 64u << 20;
// Per-field limits, checked before anything is allocated.
inline constexpr uint32_t kMaxStringBytes = 4096;
inline constexpr uint32_t kMaxBatchTokens = 4096;
inline constexpr uint32_t kMaxEmbd = 65536;
inline constexpr uint32_t kMaxVocab = 1u << 20;
inline constexpr uint32_t kMaxHistoryTokens = 1u << 16;
inline constexpr uint32_t kMaxBannedTokens = 256;
inline constexpr uint64_t kMaxSkipDraws = uint64_t{1} << 24;  // sampling::kMaxSkipDraws
// Truncations and sampler configurations one Forward may carry (a server's batch of sequences).
inline constexpr uint32_t kMaxSequenceOps = 256;
inline constexpr uint32_t kMaxChunkBytes = 8u << 20;
inline constexpr uint32_t kMaxTensors = 1u << 16;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kDigestBytes = 32;
inline constexpr size_t kPublicKeyBytes = 32;  // X25519
inline constexpr size_t kSealTagBytes = 16;    // ChaCha20-Poly1305
// A sealed frame's payload: the sealed inner header and payload, then the tag.
inline constexpr size_t kSealOverheadBytes = kFrameHeaderBytes + kSealTagBytes;

enum class MsgType : uint16_t {
  // Handshake (every connection).
  kHello = 1,      // client -> worker
  kChallenge = 2,  // worker -> client
  kAuth = 3,       // client -> worker
  kWelcome = 4,    // worker -> client: proof and worker info
  kRefused = 5,    // worker -> client: why the connection is refused, then close
  // Session control (main node <-> worker).
  kLoadModel = 16,
  kLoadProgress = 17,
  kLoaded = 18,
  kLinkNext = 19,  // connect to the next stage
  kLinked = 20,
  kAttach = 21,    // upstream stage -> worker: this connection feeds session N
  kEndSession = 22,
  kNeedWeights = 23,  // worker -> main node: no local copy; send my layers' bytes
  kWeightsChunk = 24, // main node -> worker: bytes of the model file at an offset
  kWeightsDone = 25,  // main node -> worker: digest of everything sent
  // Data path.
  kForward = 32,   // hidden states of a batch, stage to stage
  kResult = 33,    // last stage -> main node: sampled tokens and/or logits
  kError = 34,     // worker -> main node: a request or the session failed
  // Liveness.
  kPing = 48,
  kPong = 49,
  // After a handshake with a key, every frame in both directions travels inside one of these
  // (see net/socket.h): its payload is another frame, encrypted and authenticated.
  kSealed = 64,
};

// Name for logs and errors; "unknown" for ids not in MsgType.
std::string_view MsgTypeName(uint16_t type);
bool IsKnownMsgType(uint16_t type);

// Connection roles announced in Hello.
enum class Role : uint8_t {
  kMainNode = 1,  // the main node: owns a session on this worker
  kUpstream = 2,  // the previous pipeline stage: sends Forward frames into a session
  kProbe = 3,     // `tandem probe`: proves the key both ways, reads WorkerInfo, pings; no session
};

}  // namespace tandem::net
