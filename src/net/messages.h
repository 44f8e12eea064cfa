// Messages of the tandem protocol (net/protocol.h) and their codec.
//
// Each message is a plain struct with Encode(), which appends its payload to a Writer, and a
// static Decode(), which parses a whole payload from untrusted bytes: every length is checked
// against the limits in protocol.h and the bytes present before anything is allocated, every
// enum and flag is checked, and trailing bytes are an error. A decode failure is a Corruption
// status naming the message and field.
//
// Thread safety: values; no shared state.
#pragma once

#include <array>
#include <cstring>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/byte_reader.h"
#include "base/status.h"
#include "net/protocol.h"

namespace tandem::net {

// Appends little-endian fields to a byte buffer.
class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  void U8(uint8_t v) { Put(&v, 1); }
  void U16(uint16_t v) { Put(&v, 2); }
  void U32(uint32_t v) { Put(&v, 4); }
  void U64(uint64_t v) { Put(&v, 8); }
  void I32(int32_t v) { Put(&v, 4); }
  void F32(float v) { Put(&v, 4); }
  void Bytes(const void* p, size_t n) { Put(p, n); }
  void Str(std::string_view s);  // u32 length + bytes; REQUIRES: s.size() <= kMaxStringBytes

 private:
  void Put(const void* p, size_t n);
  std::vector<uint8_t>* out_;
};

// A message without payload (Linked, EndSession).
struct Empty {
  void Encode(Writer&) const {}
  static Result<Empty> Decode(std::span<const uint8_t> payload) {
    if (!payload.empty()) return Status::Corruption("unexpected payload");
    return Empty{};
  }
};

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;
using Digest = std::array<uint8_t, kDigestBytes>;
using PublicKey = std::array<uint8_t, kPublicKeyBytes>;

struct Hello {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  Role role = Role::kMainNode;
  Nonce nonce{};
  PublicKey ephemeral{};  // the client's X25519 key for this connection only
  void Encode(Writer& w) const;
  static Result<Hello> Decode(std::span<const uint8_t> payload);
};

struct Challenge {
  uint16_t version = kProtocolVersion;
  bool auth_required = false;
  Nonce nonce{};
  PublicKey ephemeral{};  // the worker's X25519 key for this connection only
  void Encode(Writer& w) const;
  static Result<Challenge> Decode(std::span<const uint8_t> payload);
};

struct Auth {
  Mac mac{};  // zeros when the worker asked for no key
  void Encode(Writer& w) const;
  static Result<Auth> Decode(std::span<const uint8_t> payload);
};

// What a worker reports about itself once the client is authenticated.
// A GPU a worker computes on (gpu/device.h).
struct GpuInfo {
  std::string name;         // "Vulkan0"
  std::string description;  // the driver's device name
  uint64_t memory = 0;      // bytes of device memory
  float read_gbps = 0;      // measured read bandwidth, GB/s
};
inline constexpr uint32_t kMaxGpus = 16;

struct WorkerInfo {
  std::string name;          // host name
  std::string cpu_features;  // e.g. "avx512 vnni"
  uint32_t threads = 0;
  uint64_t free_memory = 0;  // bytes the worker may use for weights and KV cache
  float matvec_gbps = 0;     // measured Q4_K matrix-vector speed, GB/s of weights
  bool busy = false;         // serving a main node now (set per connection; a probe reads it)
  std::vector<GpuInfo> gpus;  // the GPU its stages run on (none: its CPU)
  void Encode(Writer& w) const;  // the bytes Welcome carries after the proof
};

struct Welcome {
  Mac proof{};  // the worker's proof: the key, the handshake so far and `info` (zeros without a key)
  WorkerInfo info;
  void Encode(Writer& w) const;
  static Result<Welcome> Decode(std::span<const uint8_t> payload);
};

struct Refused {
  std::string reason;
  void Encode(Writer& w) const;
  static Result<Refused> Decode(std::span<const uint8_t> payload);
};

enum class KvType : uint8_t { kF16 = 0, kQ8_0 = 1 };

struct LoadModel {
  uint64_t session = 0;
  std::string model_name;     // file name on the main node, a hint for --models-dir
  std::string model_path;     // path on the main node, tried last (same file system)
  uint64_t file_size = 0;
  Digest header_digest{};     // BLAKE3-256 of the GGUF bytes before the tensor data
  std::vector<Digest> tensor_digests;  // BLAKE3-256 of each tensor, in tensor-table order
  uint32_t layer_begin = 0, layer_end = 0;
  uint32_t n_ctx = 0;
  KvType cache_k = KvType::kF16, cache_v = KvType::kF16;
  bool flash_attn = false;
  bool last_stage = false;    // holds the output head
  bool use_mmap = false;      // compute from the file map instead of a copy on huge pages
  void Encode(Writer& w) const;
  static Result<LoadModel> Decode(std::span<const uint8_t> payload);
};

struct LoadProgress {
  uint64_t done = 0, total = 0;
  std::string what;
  void Encode(Writer& w) const;
  static Result<LoadProgress> Decode(std::span<const uint8_t> payload);
};

struct Loaded {
  uint64_t weight_bytes = 0;    // bytes of weights of this stage
  uint64_t kv_bytes = 0;        // bytes of KV cache allocated
  uint64_t bytes_received = 0;  // weight bytes that crossed the network for this load
  std::string source;           // where the weights came from, for the user
  void Encode(Writer& w) const;
  static Result<Loaded> Decode(std::span<const uint8_t> payload);
};

struct WeightsChunk {
  uint64_t offset = 0;  // where the bytes go in the model file
  uint64_t total = 0;   // bytes of the whole transfer (for progress)
  std::vector<uint8_t> bytes;  // at most kMaxChunkBytes
  void Encode(Writer& w) const;
  static Result<WeightsChunk> Decode(std::span<const uint8_t> payload);
};

struct WeightsDone {
  // Nothing: the worker checks what it received against LoadModel's tensor digests.
  void Encode(Writer& w) const;
  static Result<WeightsDone> Decode(std::span<const uint8_t> payload);
};

struct LinkNext {
  std::string host;
  uint16_t port = 0;
  void Encode(Writer& w) const;
  static Result<LinkNext> Decode(std::span<const uint8_t> payload);
};

struct Attach {
  uint64_t session = 0;
  void Encode(Writer& w) const;
  static Result<Attach> Decode(std::span<const uint8_t> payload);
};

// Sampling settings that travel with a sequence's first Forward to the last stage.
struct SamplerConfig {
  int32_t seq = 0;  // the sequence whose sampler this (re)configures
  float temperature = 0, top_p = 1, min_p = 0, repeat_penalty = 1, frequency_penalty = 0,
        presence_penalty = 0;
  int32_t top_k = 0, repeat_last_n = 0;
  uint64_t seed = 0;
  std::vector<int32_t> history;  // tokens already in the sequence, for the penalties
  std::vector<int32_t> banned;   // tokens never sampled (--ignore-eos), at most kMaxBannedTokens
  uint64_t skip_draws = 0;       // random draws already made (a resumed sequence), <= kMaxSkipDraws
};

// Drop the cells of `seq` at positions >= `from`.
struct TruncateOp {
  int32_t seq = 0, from = 0;
};

// One batch of tokens of one or more sequences, as hidden states, on its way down the pipeline.
struct Forward {
  enum Flags : uint8_t {
    kSample = 1,        // the last stage samples a token from every row marked for logits
    kReturnLogits = 2,  // the last stage returns the logits of the marked rows
    kClearAll = 8,      // every stage drops every sequence's cells (and samplers) first
    kVerify = 16,       // with kSample: `guesses` are verified (exec::RunOptions::guesses)
  };
  uint64_t request = 0;   // chosen by the main node; echoed in Result and Error
  uint8_t flags = 0;
  // Applied by every stage before the batch, in order: the truncations, then (last stage) the
  // samplers. At most kMaxSequenceOps of each.
  std::vector<TruncateOp> truncate;
  std::vector<SamplerConfig> samplers;
  std::vector<int32_t> seq, pos;
  std::vector<uint8_t> wants_logits;  // per row, 1: the head runs on it (model::Batch::logits)
  uint32_t n_embd = 0;
  std::vector<float> hidden;    // seq.size() * n_embd
  std::vector<uint32_t> stage_us;  // compute time of each stage so far, microseconds
  // kVerify only (encoded after the samplers): one per row marked for logits, -1 or a token id.
  std::vector<int32_t> guesses;
  void Encode(Writer& w) const;
  static Result<Forward> Decode(std::span<const uint8_t> payload);
  // Decodes into an existing message, reusing its vectors' memory (no allocation once warm).
  static Status DecodeInto(std::span<const uint8_t> payload, Forward* out);
};

struct ResultMsg {
  uint64_t request = 0;
  std::vector<int32_t> tokens;  // sampled tokens, one per marked row in row order (kSample; -1:
                                // not sampled, after a rejected guess)
  uint32_t n_vocab = 0;
  std::vector<float> logits;    // rows of n_vocab, when asked
  // Per-stage time spent on this request, microseconds, appended by each stage in order.
  std::vector<uint32_t> stage_us;
  void Encode(Writer& w) const;
  static Result<ResultMsg> Decode(std::span<const uint8_t> payload);
};

struct ErrorMsg {
  uint64_t request = 0;  // 0: not about one request
  uint8_t code = 0;      // tandem::Code
  std::string message;
  void Encode(Writer& w) const;
  static Result<ErrorMsg> Decode(std::span<const uint8_t> payload);
  Status ToStatus() const;
};

struct Ping {
  uint64_t id = 0;
  void Encode(Writer& w) const;
  static Result<Ping> Decode(std::span<const uint8_t> payload);
};

// The payload bytes of message `m` (no frame header).
template <typename M>
std::vector<uint8_t> EncodePayload(const M& m) {
  std::vector<uint8_t> out;
  Writer w(&out);
  m.Encode(w);
  return out;
}

// Encodes a whole frame (header and payload) of message `m` of type `t` into `out` (cleared).
template <typename M>
void EncodeFrame(MsgType t, const M& m, std::vector<uint8_t>* out) {
  out->clear();
  out->resize(kFrameHeaderBytes);
  Writer w(out);
  m.Encode(w);
  const uint32_t n = static_cast<uint32_t>(out->size() - kFrameHeaderBytes);
  const uint16_t type = static_cast<uint16_t>(t), reserved = 0;
  std::memcpy(out->data(), &n, 4);
  std::memcpy(out->data() + 4, &type, 2);
  std::memcpy(out->data() + 6, &reserved, 2);
}

struct FrameHeader {
  uint32_t payload_bytes = 0;
  uint16_t type = 0;
};
// Validates a frame header: known type, reserved 0, size within kMaxPayloadBytes.
Result<FrameHeader> DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes> bytes);

// Decodes the payload of any message type (for the fuzzer and for logging): OK when valid.
Status ValidatePayload(uint16_t type, std::span<const uint8_t> payload);

}  // namespace tandem::net
