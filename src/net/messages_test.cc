#include "net/messages.h"

#include <gtest/gtest.h>

#include <cmath>

#include <random>

namespace tandem::net {
namespace {

template <typename M>
std::vector<uint8_t> PayloadOf(const M& m) {
  return EncodePayload(m);
}

Forward SampleForward() {
  Forward f;
  f.request = 77;
  f.flags = Forward::kSample;
  f.truncate = {{3, 10}, {5, 0}};
  f.seq = {3, 3};
  f.pos = {10, 11};
  f.wants_logits = {0, 1};
  f.n_embd = 4;
  f.hidden = {1, 2, 3, 4, 5, 6, 7, -8.5f};
  f.samplers.resize(2);
  f.samplers[0].seq = 3;
  f.samplers[0].temperature = 0.7f;
  f.samplers[0].top_k = 40;
  f.samplers[0].seed = 1234;
  f.samplers[0].history = {1, 2, 3};
  f.samplers[0].banned = {2, 7};
  f.samplers[0].skip_draws = 321;
  f.samplers[1].seq = 9;
  f.samplers[1].history = {4};
  return f;
}

TEST(MessagesTest, ForwardRoundTrips) {
  const Forward f = SampleForward();
  Result<Forward> g = Forward::Decode(PayloadOf(f));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->request, 77u);
  EXPECT_EQ(g->flags, f.flags);
  ASSERT_EQ(g->truncate.size(), 2u);
  EXPECT_EQ(g->truncate[0].seq, 3);
  EXPECT_EQ(g->truncate[0].from, 10);
  EXPECT_EQ(g->truncate[1].seq, 5);
  EXPECT_EQ(g->truncate[1].from, 0);
  EXPECT_EQ(g->seq, f.seq);
  EXPECT_EQ(g->pos, f.pos);
  EXPECT_EQ(g->wants_logits, f.wants_logits);
  EXPECT_EQ(g->hidden, f.hidden);
  ASSERT_EQ(g->samplers.size(), 2u);
  EXPECT_EQ(g->samplers[0].seq, 3);
  EXPECT_EQ(g->samplers[0].history, f.samplers[0].history);
  EXPECT_EQ(g->samplers[0].banned, f.samplers[0].banned);
  EXPECT_EQ(g->samplers[0].seed, 1234u);
  EXPECT_EQ(g->samplers[0].skip_draws, 321u);
  EXPECT_EQ(g->samplers[1].skip_draws, 0u);
  EXPECT_FLOAT_EQ(g->samplers[0].temperature, 0.7f);
  EXPECT_EQ(g->samplers[1].seq, 9);
  EXPECT_EQ(g->samplers[1].history, f.samplers[1].history);
}

// A sender could ask a worker to skip 2^64 draws (minutes of work): refused before anything runs.
TEST(MessagesTest, ForwardRefusesTooManySkippedDraws) {
  Forward f = SampleForward();
  f.samplers[1].skip_draws = kMaxSkipDraws;
  EXPECT_TRUE(Forward::Decode(PayloadOf(f)).ok());
  f.samplers[1].skip_draws = kMaxSkipDraws + 1;
  Result<Forward> g = Forward::Decode(PayloadOf(f));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("skip_draws"), std::string::npos) << g.status().ToString();
}

// Guesses to verify travel with flag kVerify only: one per marked row, each -1 or a token id.
TEST(MessagesTest, ForwardCarriesGuessesToVerify) {
  Forward f = SampleForward();
  f.wants_logits = {1, 1};
  f.flags = Forward::kSample | Forward::kVerify;
  f.guesses = {42, -1};
  Result<Forward> g = Forward::Decode(PayloadOf(f));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->guesses, f.guesses);
  f.flags = Forward::kSample;  // without the flag nothing is sent or read
  g = Forward::Decode(PayloadOf(f));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->guesses.empty());
  f.flags = Forward::kSample | Forward::kVerify;
  f.guesses = {42};  // not one per marked row
  EXPECT_FALSE(Forward::Decode(PayloadOf(f)).ok());
  f.guesses = {42, -2};
  EXPECT_FALSE(Forward::Decode(PayloadOf(f)).ok());
  f.guesses = {42, -1};
  f.flags = Forward::kVerify;  // verifying without sampling
  EXPECT_FALSE(Forward::Decode(PayloadOf(f)).ok());
  ResultMsg r;
  r.tokens = {5, -1};
  EXPECT_TRUE(ResultMsg::Decode(PayloadOf(r)).ok());
  r.tokens = {5, -2};
  EXPECT_FALSE(ResultMsg::Decode(PayloadOf(r)).ok());
}

TEST(MessagesTest, HandshakeAndControlRoundTrip) {
  Hello h;
  h.role = Role::kUpstream;
  h.nonce[5] = 9;
  Result<Hello> h2 = Hello::Decode(PayloadOf(h));
  ASSERT_TRUE(h2.ok());
  EXPECT_EQ(h2->role, Role::kUpstream);
  EXPECT_EQ(h2->nonce, h.nonce);

  Welcome w;
  w.info = {"node", "avx2", 8, 1ull << 34, 12.5f, true, {{"Vulkan0", "NVIDIA H200", 140ull << 30, 4100.5f}}};
  Result<Welcome> w2 = Welcome::Decode(PayloadOf(w));
  ASSERT_TRUE(w2.ok());
  ASSERT_EQ(w2->info.gpus.size(), 1u);
  EXPECT_EQ(w2->info.gpus[0].name, "Vulkan0");
  EXPECT_EQ(w2->info.gpus[0].description, "NVIDIA H200");
  EXPECT_EQ(w2->info.gpus[0].memory, 140ull << 30);
  EXPECT_FLOAT_EQ(w2->info.gpus[0].read_gbps, 4100.5f);
  EXPECT_EQ(w2->info.name, "node");
  EXPECT_EQ(w2->info.free_memory, 1ull << 34);
  EXPECT_EQ(w2->info.threads, 8u);
  EXPECT_FLOAT_EQ(w2->info.matvec_gbps, 12.5f);
  EXPECT_TRUE(w2->info.busy);
  // A Welcome's GPU list is bounded and its bandwidths finite: more than kMaxGpus entries, or a
  // NaN or negative bandwidth, is refused naming the field (the list is read from an untrusted peer).
  Welcome many = w;
  many.info.gpus.assign(kMaxGpus + 1, w.info.gpus[0]);
  Result<Welcome> too_many = Welcome::Decode(PayloadOf(many));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("gpus"), std::string::npos) << too_many.status().ToString();
  many.info.gpus.resize(kMaxGpus);
  EXPECT_TRUE(Welcome::Decode(PayloadOf(many)).ok());
  for (float bad : {std::nanf(""), -1.0f, INFINITY}) {
    Welcome odd = w;
    odd.info.gpus[0].read_gbps = bad;
    Result<Welcome> refused = Welcome::Decode(PayloadOf(odd));
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("read_gbps"), std::string::npos) << refused.status().ToString();
  }

  LoadModel l;
  l.session = 5;
  l.model_name = "m.gguf";
  l.layer_begin = 4;
  l.layer_end = 9;
  l.n_ctx = 512;
  l.cache_v = KvType::kQ8_0;
  l.use_mmap = true;
  l.tensor_digests.resize(3);
  l.tensor_digests[2].fill(7);
  Result<LoadModel> l2 = LoadModel::Decode(PayloadOf(l));
  ASSERT_TRUE(l2.ok()) << l2.status().ToString();
  EXPECT_EQ(l2->layer_end, 9u);
  ASSERT_EQ(l2->tensor_digests.size(), 3u);
  EXPECT_EQ(l2->tensor_digests[2], l.tensor_digests[2]);
  EXPECT_EQ(l2->cache_v, KvType::kQ8_0);
  EXPECT_TRUE(l2->use_mmap);
  EXPECT_FALSE(l2->last_stage);

  ResultMsg r;
  r.request = 2;
  r.tokens = {17, 4};
  r.n_vocab = 3;
  r.logits = {1, 2, 3, 4, 5, 6};
  r.stage_us = {10, 20};
  Result<ResultMsg> r2 = ResultMsg::Decode(PayloadOf(r));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->tokens, r.tokens);
  EXPECT_EQ(r2->logits, r.logits);
  EXPECT_EQ(r2->stage_us, r.stage_us);
  r.tokens = {-3};
  EXPECT_FALSE(ResultMsg::Decode(PayloadOf(r)).ok());
}

TEST(MessagesTest, RejectsEveryTruncationAndTrailingBytes) {
  const std::vector<uint8_t> p = PayloadOf(SampleForward());
  for (size_t n = 0; n < p.size(); ++n) {
    EXPECT_FALSE(Forward::Decode(std::span(p.data(), n)).ok()) << "prefix " << n;
  }
  std::vector<uint8_t> longer = p;
  longer.push_back(0);
  Result<Forward> f = Forward::Decode(longer);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("trailing"), std::string::npos);
}

TEST(MessagesTest, RejectsOutOfRangeFields) {
  Forward f = SampleForward();
  f.seq[1] = -4;
  EXPECT_FALSE(Forward::Decode(PayloadOf(f)).ok());
  f = SampleForward();
  f.wants_logits = {0, 0};  // asks to sample but marks no row
  EXPECT_FALSE(Forward::Decode(PayloadOf(f)).ok());
  f = SampleForward();
  f.flags |= 0x80;
  EXPECT_FALSE(Forward::Decode(PayloadOf(f)).ok());

  // A token count beyond the limit is refused before anything is allocated.
  std::vector<uint8_t> p = PayloadOf(SampleForward());
  const uint32_t huge = kMaxBatchTokens + 1;
  std::memcpy(p.data() + 8 + 1 + 4 + 2 * 8, &huge, 4);  // after request, flags, 2 truncations
  Result<Forward> g = Forward::Decode(p);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("n_tokens"), std::string::npos) << g.status().ToString();
  // So is a truncation or sampler count beyond kMaxSequenceOps, and a negative sequence.
  p = PayloadOf(SampleForward());
  const uint32_t many = kMaxSequenceOps + 1;
  std::memcpy(p.data() + 8 + 1, &many, 4);
  g = Forward::Decode(p);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("truncate"), std::string::npos) << g.status().ToString();
  f = SampleForward();
  f.samplers.resize(kMaxSequenceOps + 1);
  g = Forward::Decode(PayloadOf(f));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("samplers"), std::string::npos) << g.status().ToString();
  f = SampleForward();
  f.samplers[1].seq = -1;
  EXPECT_FALSE(Forward::Decode(PayloadOf(f)).ok());
  f = SampleForward();
  f.truncate[0].from = -1;
  EXPECT_FALSE(Forward::Decode(PayloadOf(f)).ok());

  LoadModel l;
  l.layer_begin = 5;
  l.layer_end = 5;
  l.n_ctx = 8;
  l.tensor_digests.resize(1);
  EXPECT_FALSE(LoadModel::Decode(PayloadOf(l)).ok());
  l.layer_end = 6;
  EXPECT_TRUE(LoadModel::Decode(PayloadOf(l)).ok());
  l.tensor_digests.clear();  // a model without digests cannot be checked
  EXPECT_FALSE(LoadModel::Decode(PayloadOf(l)).ok());

  Hello h;
  h.magic = 0x12345678;
  EXPECT_FALSE(Hello::Decode(PayloadOf(h)).ok());

  // Every error code a worker can report goes through (a lost GPU is kUnavailable); 0 and codes
  // past the last are refused.
  ErrorMsg e;
  e.message = "x";
  for (int c = 1; c <= static_cast<int>(kLastCode); ++c) {
    e.code = static_cast<uint8_t>(c);
    Result<ErrorMsg> back = ErrorMsg::Decode(PayloadOf(e));
    ASSERT_TRUE(back.ok()) << c << ": " << back.status().ToString();
    EXPECT_EQ(back->code, c);
  }
  for (int c : {0, static_cast<int>(kLastCode) + 1, 255}) {
    e.code = static_cast<uint8_t>(c);
    EXPECT_FALSE(ErrorMsg::Decode(PayloadOf(e)).ok()) << c;
  }
}

TEST(MessagesTest, FrameHeaderValidation) {
  std::vector<uint8_t> frame;
  EncodeFrame(MsgType::kPing, Ping{42}, &frame);
  ASSERT_EQ(frame.size(), kFrameHeaderBytes + 8);
  Result<FrameHeader> h = DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes>(frame.data(), kFrameHeaderBytes));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->type, static_cast<uint16_t>(MsgType::kPing));
  EXPECT_EQ(h->payload_bytes, 8u);

  std::vector<uint8_t> bad = frame;
  bad[4] = 200;  // unknown type
  EXPECT_FALSE(DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes>(bad.data(), kFrameHeaderBytes)).ok());
  bad = frame;
  const uint32_t big = kMaxPayloadBytes + 1;
  std::memcpy(bad.data(), &big, 4);
  EXPECT_FALSE(DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes>(bad.data(), kFrameHeaderBytes)).ok());
  bad = frame;
  bad[7] = 1;  // reserved
  EXPECT_FALSE(DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes>(bad.data(), kFrameHeaderBytes)).ok());
}

TEST(MessagesTest, RandomBytesNeverCrashAnyDecoder) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf;
  for (int i = 0; i < 20000; ++i) {
    buf.resize(rng() % 96);
    for (uint8_t& b : buf) b = static_cast<uint8_t>(rng());
    const uint16_t type = static_cast<uint16_t>(rng() % 52);
    (void)ValidatePayload(type, buf);
  }
  // Mutations of a valid Forward: every outcome is a status, and valid ones re-encode.
  const std::vector<uint8_t> p = PayloadOf(SampleForward());
  int valid = 0;
  for (int i = 0; i < 20000; ++i) {
    buf = p;
    buf[rng() % buf.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    Result<Forward> f = Forward::Decode(buf);
    if (f.ok()) {
      ++valid;
      EXPECT_EQ(PayloadOf(*f), buf);
    }
  }
  EXPECT_GT(valid, 0);
}

}  // namespace
}  // namespace tandem::net
