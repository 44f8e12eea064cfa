#include "net/messages.h"

#include <cmath>
#include <cstring>

namespace tandem::net {
namespace {

// A cursor over one payload with a sticky error: after the first failure every read is a no-op
// and Finish() returns that failure. Keeps the Decode functions one line per field.
class Parser {
 public:
  Parser(std::span<const uint8_t> p, std::string_view msg) : r_(p), msg_(msg) {}

  template <typename T>
  void Get(T* v, std::string_view field) {
    if (!st_.ok()) return;
    Result<T> x = r_.Read<T>(field);
    if (!x.ok()) return Fail(x.status());
    *v = *x;
  }
  void Bool(bool* v, std::string_view field) {
    uint8_t b = 0;
    Get(&b, field);
    if (st_.ok() && b > 1) return Fail(field, "is " + std::to_string(b) + ", not 0 or 1");
    *v = b == 1;
  }
  void Str(std::string* s, std::string_view field) {
    uint32_t n = 0;
    Get(&n, field);
    if (!st_.ok()) return;
    if (n > kMaxStringBytes) return Fail(field, "is " + std::to_string(n) + " bytes (limit " + std::to_string(kMaxStringBytes) + ")");
    Result<std::span<const uint8_t>> b = r_.ReadBytes(n, field);
    if (!b.ok()) return Fail(b.status());
    s->assign(reinterpret_cast<const char*>(b->data()), b->size());
  }
  void Fixed(uint8_t* p, size_t n, std::string_view field) {
    if (!st_.ok()) return;
    Result<std::span<const uint8_t>> b = r_.ReadBytes(n, field);
    if (!b.ok()) return Fail(b.status());
    std::memcpy(p, b->data(), n);
  }
  // Reads `count` values of T into v (resized), after checking the bytes are there.
  template <typename T>
  void Array(std::vector<T>* v, uint64_t count, std::string_view field) {
    if (!st_.ok()) return;
    if (count > r_.remaining() / sizeof(T)) {
      return Fail(field, "needs " + std::to_string(count) + " values but only " +
                             std::to_string(r_.remaining()) + " bytes remain");
    }
    Result<std::span<const uint8_t>> b = r_.ReadBytes(count * sizeof(T), field);
    if (!b.ok()) return Fail(b.status());
    v->resize(count);
    if (count > 0) std::memcpy(v->data(), b->data(), count * sizeof(T));
  }
  void Check(bool cond, std::string_view field, const std::string& what) {
    if (st_.ok() && !cond) Fail(field, what);
  }
  bool ok() const { return st_.ok(); }
  Status Finish() {
    if (st_.ok() && r_.remaining() != 0) {
      Fail("payload", std::to_string(r_.remaining()) + " unexpected trailing bytes");
    }
    return st_;
  }

 private:
  void Fail(const Status& s) { st_ = Status::Corruption(std::string(msg_) + ": " + s.message()); }
  void Fail(std::string_view field, const std::string& what) {
    st_ = Status::Corruption(std::string(msg_) + ": " + std::string(field) + " " + what);
  }
  ByteReader r_;
  std::string_view msg_;
  Status st_;
};

template <typename M>
Result<M> Finish(Parser& p, M m) {
  Status st = p.Finish();
  if (!st.ok()) return st;
  return m;
}

}  // namespace

void Writer::Put(const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out_->insert(out_->end(), b, b + n);
}

void Writer::Str(std::string_view s) {
  const size_t n = std::min<size_t>(s.size(), kMaxStringBytes);
  U32(static_cast<uint32_t>(n));
  Put(s.data(), n);
}

std::string_view MsgTypeName(uint16_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kHello: return "Hello";
    case MsgType::kChallenge: return "Challenge";
    case MsgType::kAuth: return "Auth";
    case MsgType::kWelcome: return "Welcome";
    case MsgType::kRefused: return "Refused";
    case MsgType::kLoadModel: return "LoadModel";
    case MsgType::kLoadProgress: return "LoadProgress";
    case MsgType::kLoaded: return "Loaded";
    case MsgType::kLinkNext: return "LinkNext";
    case MsgType::kLinked: return "Linked";
    case MsgType::kAttach: return "Attach";
    case MsgType::kEndSession: return "EndSession";
    case MsgType::kNeedWeights: return "NeedWeights";
    case MsgType::kWeightsChunk: return "WeightsChunk";
    case MsgType::kWeightsDone: return "WeightsDone";
    case MsgType::kForward: return "Forward";
    case MsgType::kResult: return "Result";
    case MsgType::kError: return "Error";
    case MsgType::kPing: return "Ping";
    case MsgType::kPong: return "Pong";
    case MsgType::kSealed: return "Sealed";
  }
  return "unknown";
}

bool IsKnownMsgType(uint16_t type) { return MsgTypeName(type) != "unknown"; }

Result<FrameHeader> DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes> b) {
  FrameHeader h;
  uint16_t reserved;
  std::memcpy(&h.payload_bytes, b.data(), 4);
  std::memcpy(&h.type, b.data() + 4, 2);
  std::memcpy(&reserved, b.data() + 6, 2);
  if (!IsKnownMsgType(h.type)) {
    return Status::Corruption("frame of unknown message type " + std::to_string(h.type));
  }
  if (reserved != 0) return Status::Corruption("frame header reserved field is not 0");
  const uint64_t limit = kMaxPayloadBytes + (h.type == static_cast<uint16_t>(MsgType::kSealed) ? kSealOverheadBytes : 0);
  if (h.payload_bytes > limit) {
    return Status::Corruption(std::string(MsgTypeName(h.type)) + " frame of " +
                              std::to_string(h.payload_bytes) + " bytes exceeds the limit of " +
                              std::to_string(limit));
  }
  return h;
}

void Hello::Encode(Writer& w) const {
  w.U32(magic);
  w.U16(version);
  w.U8(static_cast<uint8_t>(role));
  w.Bytes(nonce.data(), nonce.size());
  w.Bytes(ephemeral.data(), ephemeral.size());
}
Result<Hello> Hello::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "Hello");
  Hello m;
  uint8_t role = 0;
  p.Get(&m.magic, "magic");
  p.Check(m.magic == kMagic, "magic", "is not TNDM (not a tandem client)");
  p.Get(&m.version, "version");
  p.Get(&role, "role");
  p.Check(role >= 1 && role <= 3, "role", "is " + std::to_string(role) + ", not 1, 2 or 3");
  m.role = static_cast<Role>(role);
  p.Fixed(m.nonce.data(), m.nonce.size(), "nonce");
  p.Fixed(m.ephemeral.data(), m.ephemeral.size(), "ephemeral");
  return Finish(p, m);
}

void Challenge::Encode(Writer& w) const {
  w.U16(version);
  w.U8(auth_required ? 1 : 0);
  w.Bytes(nonce.data(), nonce.size());
  w.Bytes(ephemeral.data(), ephemeral.size());
}
Result<Challenge> Challenge::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "Challenge");
  Challenge m;
  p.Get(&m.version, "version");
  p.Bool(&m.auth_required, "auth_required");
  p.Fixed(m.nonce.data(), m.nonce.size(), "nonce");
  p.Fixed(m.ephemeral.data(), m.ephemeral.size(), "ephemeral");
  return Finish(p, m);
}

void Auth::Encode(Writer& w) const { w.Bytes(mac.data(), mac.size()); }
Result<Auth> Auth::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "Auth");
  Auth m;
  p.Fixed(m.mac.data(), m.mac.size(), "mac");
  return Finish(p, m);
}

void Welcome::Encode(Writer& w) const {
  w.Bytes(proof.data(), proof.size());
  info.Encode(w);
}
void WorkerInfo::Encode(Writer& w) const {
  w.Str(name);
  w.Str(cpu_features);
  w.U32(threads);
  w.U64(free_memory);
  w.F32(matvec_gbps);
  w.U8(busy ? 1 : 0);
  w.U32(static_cast<uint32_t>(gpus.size()));
  for (const GpuInfo& g : gpus) {
    w.Str(g.name);
    w.Str(g.description);
    w.U64(g.memory);
    w.F32(g.read_gbps);
  }
}
Result<Welcome> Welcome::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "Welcome");
  Welcome m;
  p.Fixed(m.proof.data(), m.proof.size(), "proof");
  p.Str(&m.info.name, "name");
  p.Str(&m.info.cpu_features, "cpu_features");
  p.Get(&m.info.threads, "threads");
  p.Get(&m.info.free_memory, "free_memory");
  p.Get(&m.info.matvec_gbps, "matvec_gbps");
  p.Check(std::isfinite(m.info.matvec_gbps) && m.info.matvec_gbps >= 0, "matvec_gbps", "is not a finite non-negative number");
  p.Bool(&m.info.busy, "busy");
  uint32_t ng = 0;
  p.Get(&ng, "gpus");
  p.Check(ng <= kMaxGpus, "gpus", "has " + std::to_string(ng) + " entries (at most " + std::to_string(kMaxGpus) + ")");
  for (uint32_t i = 0; i < ng && p.ok(); ++i) {
    GpuInfo g;
    p.Str(&g.name, "gpu name");
    p.Str(&g.description, "gpu description");
    p.Get(&g.memory, "gpu memory");
    p.Get(&g.read_gbps, "gpu read_gbps");
    p.Check(std::isfinite(g.read_gbps) && g.read_gbps >= 0, "gpu read_gbps", "is not a finite non-negative number");
    m.info.gpus.push_back(std::move(g));
  }
  return Finish(p, m);
}

void Refused::Encode(Writer& w) const { w.Str(reason); }
Result<Refused> Refused::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "Refused");
  Refused m;
  p.Str(&m.reason, "reason");
  return Finish(p, m);
}

void LoadModel::Encode(Writer& w) const {
  w.U64(session);
  w.Str(model_name);
  w.Str(model_path);
  w.U64(file_size);
  w.Bytes(header_digest.data(), header_digest.size());
  w.U32(static_cast<uint32_t>(tensor_digests.size()));
  for (const Digest& d : tensor_digests) w.Bytes(d.data(), d.size());
  w.U32(layer_begin);
  w.U32(layer_end);
  w.U32(n_ctx);
  w.U8(static_cast<uint8_t>(cache_k));
  w.U8(static_cast<uint8_t>(cache_v));
  w.U8(flash_attn ? 1 : 0);
  w.U8(last_stage ? 1 : 0);
  w.U8(use_mmap ? 1 : 0);
}
Result<LoadModel> LoadModel::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "LoadModel");
  LoadModel m;
  uint8_t ck = 0, cv = 0;
  p.Get(&m.session, "session");
  p.Str(&m.model_name, "model_name");
  p.Str(&m.model_path, "model_path");
  p.Get(&m.file_size, "file_size");
  p.Fixed(m.header_digest.data(), m.header_digest.size(), "header_digest");
  uint32_t nt = 0;
  p.Get(&nt, "tensor_digests");
  p.Check(nt > 0 && nt <= kMaxTensors, "tensor_digests",
          "has " + std::to_string(nt) + " entries (1 to " + std::to_string(kMaxTensors) + ")");
  p.Array(&m.tensor_digests, nt, "tensor_digests");
  p.Get(&m.layer_begin, "layer_begin");
  p.Get(&m.layer_end, "layer_end");
  p.Check(m.layer_begin < m.layer_end && m.layer_end <= 4096, "layer range",
          std::to_string(m.layer_begin) + ".." + std::to_string(m.layer_end) + " is empty or too large");
  p.Get(&m.n_ctx, "n_ctx");
  p.Check(m.n_ctx > 0 && m.n_ctx <= (1u << 24), "n_ctx", "is out of range");
  p.Get(&ck, "cache_k");
  p.Get(&cv, "cache_v");
  p.Check(ck <= 1 && cv <= 1, "cache type", "is not f16 (0) or q8_0 (1)");
  m.cache_k = static_cast<KvType>(ck);
  m.cache_v = static_cast<KvType>(cv);
  p.Bool(&m.flash_attn, "flash_attn");
  p.Bool(&m.last_stage, "last_stage");
  p.Bool(&m.use_mmap, "use_mmap");
  return Finish(p, m);
}

void LoadProgress::Encode(Writer& w) const {
  w.U64(done);
  w.U64(total);
  w.Str(what);
}
Result<LoadProgress> LoadProgress::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "LoadProgress");
  LoadProgress m;
  p.Get(&m.done, "done");
  p.Get(&m.total, "total");
  p.Str(&m.what, "what");
  return Finish(p, m);
}

void Loaded::Encode(Writer& w) const {
  w.U64(weight_bytes);
  w.U64(kv_bytes);
  w.U64(bytes_received);
  w.Str(source);
}
Result<Loaded> Loaded::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "Loaded");
  Loaded m;
  p.Get(&m.weight_bytes, "weight_bytes");
  p.Get(&m.kv_bytes, "kv_bytes");
  p.Get(&m.bytes_received, "bytes_received");
  p.Str(&m.source, "source");
  return Finish(p, m);
}

void WeightsChunk::Encode(Writer& w) const {
  w.U64(offset);
  w.U64(total);
  w.U32(static_cast<uint32_t>(bytes.size()));
  w.Bytes(bytes.data(), bytes.size());
}
Result<WeightsChunk> WeightsChunk::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "WeightsChunk");
  WeightsChunk m;
  uint32_t n = 0;
  p.Get(&m.offset, "offset");
  p.Get(&m.total, "total");
  p.Get(&n, "n_bytes");
  p.Check(n > 0 && n <= kMaxChunkBytes, "n_bytes", "is " + std::to_string(n) + " (1.." + std::to_string(kMaxChunkBytes) + ")");
  p.Check(m.offset <= (1ull << 50), "offset", "is out of range");
  p.Array(&m.bytes, n, "bytes");
  return Finish(p, std::move(m));
}

void WeightsDone::Encode(Writer&) const {}
Result<WeightsDone> WeightsDone::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "WeightsDone");
  return Finish(p, WeightsDone{});
}

void LinkNext::Encode(Writer& w) const {
  w.Str(host);
  w.U16(port);
}
Result<LinkNext> LinkNext::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "LinkNext");
  LinkNext m;
  p.Str(&m.host, "host");
  p.Check(!m.host.empty() && m.host.size() <= 255, "host", "is empty or longer than 255 bytes");
  p.Get(&m.port, "port");
  p.Check(m.port != 0, "port", "is 0");
  return Finish(p, m);
}

void Attach::Encode(Writer& w) const { w.U64(session); }
Result<Attach> Attach::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "Attach");
  Attach m;
  p.Get(&m.session, "session");
  return Finish(p, m);
}

void Forward::Encode(Writer& w) const {
  w.U64(request);
  w.U8(flags);
  w.U32(static_cast<uint32_t>(truncate.size()));
  for (const TruncateOp& t : truncate) {
    w.I32(t.seq);
    w.I32(t.from);
  }
  const uint32_t n = static_cast<uint32_t>(seq.size());
  w.U32(n);
  w.U32(n_embd);
  w.Bytes(seq.data(), n * 4);
  w.Bytes(pos.data(), n * 4);
  w.Bytes(wants_logits.data(), n);
  w.Bytes(hidden.data(), hidden.size() * 4);
  w.U32(static_cast<uint32_t>(stage_us.size()));
  w.Bytes(stage_us.data(), stage_us.size() * 4);
  w.U32(static_cast<uint32_t>(samplers.size()));
  for (const SamplerConfig& s : samplers) {
    w.I32(s.seq);
    w.F32(s.temperature);
    w.F32(s.top_p);
    w.F32(s.min_p);
    w.F32(s.repeat_penalty);
    w.F32(s.frequency_penalty);
    w.F32(s.presence_penalty);
    w.I32(s.top_k);
    w.I32(s.repeat_last_n);
    w.U64(s.seed);
    w.U32(static_cast<uint32_t>(s.history.size()));
    w.Bytes(s.history.data(), s.history.size() * 4);
    w.U32(static_cast<uint32_t>(s.banned.size()));
    w.Bytes(s.banned.data(), s.banned.size() * 4);
    w.U64(s.skip_draws);
  }
  if (flags & kVerify) {
    w.U32(static_cast<uint32_t>(guesses.size()));
    w.Bytes(guesses.data(), guesses.size() * 4);
  }
}

Status Forward::DecodeInto(std::span<const uint8_t> payload, Forward* m) {
  Parser p(payload, "Forward");
  uint32_t n = 0, nt = 0;
  p.Get(&m->request, "request");
  p.Get(&m->flags, "flags");
  p.Check((m->flags & ~(kSample | kReturnLogits | kClearAll | kVerify)) == 0, "flags", "has unknown bits");
  p.Check(!(m->flags & kVerify) || (m->flags & kSample), "flags", "ask to verify guesses without sampling");
  p.Get(&nt, "truncate");
  p.Check(nt <= kMaxSequenceOps, "truncate", "has " + std::to_string(nt) + " entries (limit " +
                                                 std::to_string(kMaxSequenceOps) + ")");
  m->truncate.clear();
  for (uint32_t i = 0; p.ok() && i < nt; ++i) {
    TruncateOp t;
    p.Get(&t.seq, "truncate.seq");
    p.Get(&t.from, "truncate.from");
    p.Check(t.seq >= 0 && t.from >= 0, "truncate", "is negative");
    m->truncate.push_back(t);
  }
  p.Get(&n, "n_tokens");
  p.Check(n > 0 && n <= kMaxBatchTokens, "n_tokens", "is " + std::to_string(n) + " (1.." + std::to_string(kMaxBatchTokens) + ")");
  p.Get(&m->n_embd, "n_embd");
  p.Check(m->n_embd > 0 && m->n_embd <= kMaxEmbd, "n_embd", "is out of range");
  p.Array(&m->seq, n, "seq");
  p.Array(&m->pos, n, "pos");
  p.Array(&m->wants_logits, n, "wants_logits");
  if (p.ok()) {
    for (uint32_t i = 0; i < n; ++i) {
      p.Check(m->seq[i] >= 0 && m->pos[i] >= 0, "seq/pos", "is negative at token " + std::to_string(i));
      p.Check(m->wants_logits[i] <= 1, "wants_logits", "is not 0 or 1 at token " + std::to_string(i));
    }
  }
  p.Array(&m->hidden, static_cast<uint64_t>(n) * m->n_embd, "hidden");
  uint32_t stages = 0;
  p.Get(&stages, "stages");
  p.Check(stages <= 256, "stages", "is out of range");
  p.Array(&m->stage_us, stages, "stage_us");
  uint32_t ns = 0;
  p.Get(&ns, "samplers");
  p.Check(ns <= kMaxSequenceOps, "samplers", "has " + std::to_string(ns) + " entries (limit " +
                                                  std::to_string(kMaxSequenceOps) + ")");
  if (p.ok()) m->samplers.resize(ns);
  for (uint32_t i = 0; p.ok() && i < ns; ++i) {
    SamplerConfig& s = m->samplers[i];
    uint32_t nh = 0;
    p.Get(&s.seq, "sampler.seq");
    p.Check(s.seq >= 0, "sampler.seq", "is negative");
    p.Get(&s.temperature, "temperature");
    p.Get(&s.top_p, "top_p");
    p.Get(&s.min_p, "min_p");
    p.Get(&s.repeat_penalty, "repeat_penalty");
    p.Get(&s.frequency_penalty, "frequency_penalty");
    p.Get(&s.presence_penalty, "presence_penalty");
    p.Get(&s.top_k, "top_k");
    p.Get(&s.repeat_last_n, "repeat_last_n");
    p.Get(&s.seed, "seed");
    p.Get(&nh, "history");
    p.Check(nh <= kMaxHistoryTokens, "history", "has " + std::to_string(nh) + " tokens (limit " + std::to_string(kMaxHistoryTokens) + ")");
    p.Array(&s.history, nh, "history");
    if (p.ok()) {
      for (int32_t t : s.history) p.Check(t >= 0, "history", "holds a negative token id");
    }
    uint32_t nb = 0;
    p.Get(&nb, "banned");
    p.Check(nb <= kMaxBannedTokens, "banned", "has " + std::to_string(nb) + " tokens (limit " + std::to_string(kMaxBannedTokens) + ")");
    p.Array(&s.banned, nb, "banned");
    if (p.ok()) {
      for (int32_t t : s.banned) p.Check(t >= 0, "banned", "holds a negative token id");
    }
    p.Get(&s.skip_draws, "skip_draws");
    p.Check(s.skip_draws <= kMaxSkipDraws, "skip_draws", "is " + std::to_string(s.skip_draws) + " (limit " +
                                                        std::to_string(kMaxSkipDraws) + ")");
  }
  m->guesses.clear();
  if (p.ok() && (m->flags & kVerify)) {
    uint32_t marked = 0, ng = 0;
    for (uint8_t l : m->wants_logits) marked += l;
    p.Get(&ng, "guesses");
    p.Check(ng == marked, "guesses", "has " + std::to_string(ng) + " entries for " + std::to_string(marked) +
                                         " rows marked for logits");
    p.Array(&m->guesses, ng, "guesses");
    if (p.ok()) {
      for (int32_t g : m->guesses) p.Check(g >= -1, "guesses", "holds a token id below -1");
    }
  }
  if (p.ok() && (m->flags & (kSample | kReturnLogits))) {
    bool any = false;
    for (uint8_t l : m->wants_logits) any = any || l;
    p.Check(any, "flags", "ask for a result but no row is marked for logits");
  }
  return p.Finish();
}

Result<Forward> Forward::Decode(std::span<const uint8_t> payload) {
  Forward m;
  TANDEM_RETURN_IF_ERROR(DecodeInto(payload, &m));
  return m;
}

void ResultMsg::Encode(Writer& w) const {
  w.U64(request);
  w.U32(static_cast<uint32_t>(tokens.size()));
  w.Bytes(tokens.data(), tokens.size() * 4);
  w.U32(n_vocab);
  w.U32(n_vocab == 0 ? 0 : static_cast<uint32_t>(logits.size() / n_vocab));
  w.Bytes(logits.data(), logits.size() * 4);
  w.U32(static_cast<uint32_t>(stage_us.size()));
  w.Bytes(stage_us.data(), stage_us.size() * 4);
}
Result<ResultMsg> ResultMsg::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "Result");
  ResultMsg m;
  uint32_t rows = 0, stages = 0, nt = 0;
  p.Get(&m.request, "request");
  p.Get(&nt, "tokens");
  p.Check(nt <= kMaxBatchTokens, "tokens", "is out of range");
  p.Array(&m.tokens, nt, "tokens");
  if (p.ok()) {
    for (int32_t t : m.tokens) p.Check(t >= -1, "tokens", "holds a token id below -1");
  }
  p.Get(&m.n_vocab, "n_vocab");
  p.Check(m.n_vocab <= kMaxVocab, "n_vocab", "is out of range");
  p.Get(&rows, "rows");
  p.Check(rows <= kMaxBatchTokens && (rows == 0 || m.n_vocab > 0), "rows", "is out of range");
  p.Array(&m.logits, static_cast<uint64_t>(rows) * m.n_vocab, "logits");
  p.Get(&stages, "stages");
  p.Check(stages <= 256, "stages", "is out of range");
  p.Array(&m.stage_us, stages, "stage_us");
  return Finish(p, std::move(m));
}

void ErrorMsg::Encode(Writer& w) const {
  w.U64(request);
  w.U8(code);
  w.Str(message);
}
Result<ErrorMsg> ErrorMsg::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "Error");
  ErrorMsg m;
  p.Get(&m.request, "request");
  p.Get(&m.code, "code");
  p.Check(m.code >= 1 && m.code <= static_cast<uint8_t>(kLastCode), "code", "is not an error code");
  p.Str(&m.message, "message");
  return Finish(p, m);
}
Status ErrorMsg::ToStatus() const { return Status(static_cast<Code>(code), message); }

void Ping::Encode(Writer& w) const { w.U64(id); }
Result<Ping> Ping::Decode(std::span<const uint8_t> payload) {
  Parser p(payload, "Ping");
  Ping m;
  p.Get(&m.id, "id");
  return Finish(p, m);
}

Status ValidatePayload(uint16_t type, std::span<const uint8_t> b) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kHello: return Hello::Decode(b).status();
    case MsgType::kChallenge: return Challenge::Decode(b).status();
    case MsgType::kAuth: return Auth::Decode(b).status();
    case MsgType::kWelcome: return Welcome::Decode(b).status();
    case MsgType::kRefused: return Refused::Decode(b).status();
    case MsgType::kLoadModel: return LoadModel::Decode(b).status();
    case MsgType::kLoadProgress: return LoadProgress::Decode(b).status();
    case MsgType::kLoaded: return Loaded::Decode(b).status();
    case MsgType::kLinkNext: return LinkNext::Decode(b).status();
    case MsgType::kAttach: return Attach::Decode(b).status();
    case MsgType::kForward: return Forward::Decode(b).status();
    case MsgType::kResult: return ResultMsg::Decode(b).status();
    case MsgType::kError: return ErrorMsg::Decode(b).status();
    case MsgType::kPing:
    case MsgType::kPong: return Ping::Decode(b).status();
    case MsgType::kWeightsChunk: return WeightsChunk::Decode(b).status();
    case MsgType::kSealed:  // opaque here: net/socket.h opens it
      return b.size() >= kSealOverheadBytes ? Status::Ok() : Status::Corruption("Sealed frame shorter than its overhead");
    case MsgType::kWeightsDone: return WeightsDone::Decode(b).status();
    case MsgType::kLinked:
    case MsgType::kNeedWeights:
    case MsgType::kEndSession:
      return b.empty() ? Status::Ok() : Status::Corruption(std::string(MsgTypeName(type)) + " has a payload");
  }
  return Status::Corruption("unknown message type " + std::to_string(type));
}

}  // namespace tandem::net
