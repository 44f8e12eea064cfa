// Gemma 3 and Qwen3-MoE beyond the reference logits (model_reference_test): the sliding window and
// its layer pattern change late logits (so a model that ignored them would fail), bad
// hyper-parameters and missing or misshapen tensors are refused by name, and `inspect` shows the
// new hyper-parameters.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"
#include "quant/quant.h"
#include "synth/make_model.h"
#include "test_support.h"

namespace tandem {
namespace {

using testing::SharedDir;

std::string ModelFile(const std::string& name) { return (SharedDir() / "reference/models" / name).string(); }

// A copy of `src` written to a temporary file, with metadata `edit`ed and tensors kept unless
// `keep` says otherwise (or changed by `reshape`). Returns its path.
std::string EditedCopy(const std::string& src, const std::string& tag,
                       const std::function<void(gguf::GgufWriter&)>& edit,
                       const std::function<bool(const gguf::TensorInfo&)>& keep = nullptr,
                       const std::function<std::vector<uint64_t>(const gguf::TensorInfo&)>& reshape = nullptr) {
  Result<gguf::GgufFile> f = gguf::GgufFile::Open(src);
  EXPECT_TRUE(f.ok());
  gguf::GgufWriter w;
  for (const auto& [key, value] : f->metadata()) w.Set(key, value);
  edit(w);
  for (const gguf::TensorInfo& t : f->tensors()) {
    if (keep && !keep(t)) continue;
    std::vector<uint64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    if (reshape) shape = reshape(t);
    const Status st = w.AddTensor(t.name, t.type, shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  const std::string path = ::testing::TempDir() + "tandem_family_" + tag + "_" + std::to_string(getpid()) + ".gguf";
  EXPECT_TRUE(w.Write(path).ok());
  return path;
}

// Logits of every position of `tokens` in one batch.
std::vector<float> Logits(const std::string& path, const std::vector<int32_t>& tokens, bool flash) {
  Result<model::Model> m = model::Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  model::ContextOptions o;
  o.flash_attn = flash;
  model::Context ctx(*m, 128, 2, o);
  model::Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.Add(tokens[i], static_cast<int32_t>(i), 0, true);
  EXPECT_TRUE(ctx.Decode(b).ok());
  return std::vector<float>(ctx.logits(), ctx.logits() + ctx.n_logits() * m->params().n_vocab);
}

double Kl(const float* p, const float* q, int64_t n) {
  double pm = -INFINITY, qm = -INFINITY, ps = 0, qs = 0, kl = 0;
  for (int64_t i = 0; i < n; ++i) pm = std::max<double>(pm, p[i]), qm = std::max<double>(qm, q[i]);
  for (int64_t i = 0; i < n; ++i) ps += std::exp(p[i] - pm), qs += std::exp(q[i] - qm);
  for (int64_t i = 0; i < n; ++i) {
    const double lp = p[i] - pm - std::log(ps), lq = q[i] - qm - std::log(qs);
    kl += std::exp(lp) * (lp - lq);
  }
  return kl;
}

// tiny-gemma3 has a 16-token window on layers 0-4 and 6 (layer 5 global) and prompt B has 56
// tokens. A window of 64 (nothing slides) leaves the first 16 positions as they were and moves
// the later ones far; every layer global (which also gives every layer the global RoPE base)
// moves them too; the file as it is matches the reference.
TEST(ModelFamiliesTest, TheSlidingWindowAndItsLayerPatternShapeLateLogits) {
  const std::string src = ModelFile("tiny-gemma3-f16.gguf");
  TANDEM_REQUIRE_SHARED(src);
  std::ifstream in(SharedDir() / "reference/logits/tiny-gemma3-f16.B.fa0.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const std::vector<int32_t> tokens = j["prompt_tokens"].get<std::vector<int32_t>>();
  const std::vector<std::vector<float>> ref = j["logits"].get<std::vector<std::vector<float>>>();
  const int64_t V = j["n_vocab"];
  ASSERT_GT(tokens.size(), 40u);
  const std::string wide = EditedCopy(src, "window64", [](gguf::GgufWriter& w) {
    w.Set("gemma3.attention.sliding_window", gguf::Value(uint32_t{64}));
  });
  const std::string global = EditedCopy(src, "allglobal", [](gguf::GgufWriter& w) {
    w.Set("gemma3.attention.sliding_window_pattern", gguf::Value(uint32_t{1}));
  });
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash" : "standard");
    const std::vector<float> real = Logits(src, tokens, flash);
    ASSERT_EQ(real.size(), tokens.size() * V);
    double late_kl_ref = 0;
    for (size_t p = 16; p < tokens.size(); ++p) late_kl_ref = std::max(late_kl_ref, Kl(ref[p].data(), &real[p * V], V));
    EXPECT_LE(late_kl_ref, 1e-3) << "past the window the file as it is must match the reference";
    for (const std::string& other : {wide, global}) {
      SCOPED_TRACE(other);
      const std::vector<float> changed = Logits(other, tokens, flash);
      ASSERT_EQ(changed.size(), real.size());
      for (size_t p = 0; p < 16 && other == wide; ++p) {
        EXPECT_LE(Kl(&real[p * V], &changed[p * V], V), 1e-6) << "position " << p << " is inside every window";
      }
      double mean_late = 0;
      for (size_t p = 16; p < tokens.size(); ++p) mean_late += Kl(&real[p * V], &changed[p * V], V) / (tokens.size() - 16);
      EXPECT_GT(mean_late, 0.05) << "the window did not matter past position 16";
    }
  }
  std::remove(wide.c_str());
  std::remove(global.c_str());
}

// The window layers' cache keeps only the cells their window still reaches (model/kv_cache.h).
// Decoding well past the window, one token at a time after a prompt, with speculative-style
// rewinds (a batch of 5, then 3 of them truncated), must give the logits of a cache that keeps
// every cell to the bit, in both attention algorithms and with F16 and Q8_0 caches, while the
// window pool holds only the window, the rollback margin and the batch. Truncating further back
// than that is refused with an error, and starting the sequence again works.
TEST(ModelFamiliesTest, AWindowedCacheGivesTheLogitsOfAFullOneToTheBit) {
  const std::string path = ModelFile("tiny-gemma3-q4_k_m.gguf");
  TANDEM_REQUIRE_SHARED(path);
  Result<model::Model> m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const int64_t V = m->params().n_vocab, swa = m->params().n_swa;
  ASSERT_EQ(swa, 16);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 200; ++i) tokens.push_back(static_cast<int32_t>((i * 7919 + 13) % V));
  for (bool flash : {false, true}) {
    for (quant::TensorType type : {quant::TensorType::kF16, quant::TensorType::kQ8_0}) {
      SCOPED_TRACE(std::string(flash ? "flash" : "standard") + (type == quant::TensorType::kQ8_0 ? ", q8_0" : ", f16"));
      model::ContextOptions o;
      o.flash_attn = flash;
      o.type_k = o.type_v = type;
      model::ContextOptions full = o;
      full.swa_full = true;
      model::Context windowed(*m, 1024, 2, o), every(*m, 1024, 2, full);
      ASSERT_TRUE(windowed.cache().has_window());
      ASSERT_FALSE(every.cache().has_window());
      // Runs tokens [from, to) as one batch on both and compares every row's logits.
      auto step = [&](int64_t from, int64_t to) {
        model::Batch b;
        for (int64_t i = from; i < to; ++i) b.Add(tokens[i], static_cast<int32_t>(i), 0, true);
        ASSERT_TRUE(windowed.Decode(b).ok());
        ASSERT_TRUE(every.Decode(b).ok());
        ASSERT_EQ(windowed.n_logits(), to - from);
        ASSERT_EQ(0, std::memcmp(windowed.logits(), every.logits(), (to - from) * V * sizeof(float)))
            << "positions " << from << ".." << to - 1;
      };
      step(0, 24);
      int64_t pos = 24;
      while (pos < 180) {
        if (pos % 20 == 4) {  // a verification batch of 5, 3 of them rejected
          step(pos, pos + 5);
          windowed.cache().Truncate(0, static_cast<int32_t>(pos + 2));
          every.cache().Truncate(0, static_cast<int32_t>(pos + 2));
          pos += 2;
        } else {
          step(pos, pos + 1);
          ++pos;
        }
        EXPECT_LE(windowed.cache().used(model::KvCache::kWindow), swa + model::kWindowRollback + 5);
      }
      EXPECT_EQ(windowed.cache().used(), pos);
      EXPECT_LT(windowed.cache().bytes(), every.cache().bytes());
      // Further back than the margin: refused, nothing claimed; from 0 it goes again.
      windowed.cache().Truncate(0, 100);
      model::Batch b;
      b.Add(tokens[100], 100, 0, true);
      const Status st = windowed.Decode(b);
      EXPECT_FALSE(st.ok());
      EXPECT_NE(st.message().find("sliding window"), std::string::npos) << st.ToString();
      EXPECT_EQ(windowed.cache().used(), 100);
      windowed.cache().Truncate(0, 0);
      every.cache().Truncate(0, 0);
      step(0, 40);
    }
  }
}

Status LoadStatus(const std::string& path) { return model::Model::Load(path).status(); }

TEST(ModelFamiliesTest, BadExpertCountsAndTensorsAreRefusedByName) {
  const std::string src = ModelFile("tiny-qwen3moe-q8_0.gguf");
  TANDEM_REQUIRE_SHARED(src);
  struct Case {
    std::string tag, want;
    std::function<void(gguf::GgufWriter&)> edit;
    std::function<bool(const gguf::TensorInfo&)> keep = nullptr;
    std::function<std::vector<uint64_t>(const gguf::TensorInfo&)> reshape = nullptr;
  };
  const std::vector<Case> cases = {
      {"used9", "expert_used_count 9",
       [](gguf::GgufWriter& w) { w.Set("qwen3moe.expert_used_count", gguf::Value(uint32_t{9})); }},
      {"count0", "expert_count = 0", [](gguf::GgufWriter& w) { w.Set("qwen3moe.expert_count", gguf::Value(uint32_t{0})); }},
      {"count5000", "expert_count 5000",
       [](gguf::GgufWriter& w) { w.Set("qwen3moe.expert_count", gguf::Value(uint32_t{5000})); }},
      {"noexperts", "qwen3moe.expert_feed_forward_length",
       [](gguf::GgufWriter& w) { w.Set("qwen3moe.expert_feed_forward_length", gguf::Value(std::string("x"))); }},
      {"missing", "blk.1.ffn_up_exps.weight' is missing", [](gguf::GgufWriter&) {},
       [](const gguf::TensorInfo& t) { return t.name != "blk.1.ffn_up_exps.weight"; }},
      {"misshapen", "expected [256, 256, 8]", [](gguf::GgufWriter&) {}, nullptr,
       [](const gguf::TensorInfo& t) {
         std::vector<uint64_t> s(t.ne.begin(), t.ne.begin() + t.n_dims);
         if (t.name == "blk.2.ffn_gate_exps.weight") s = {256, 512, 4};  // same bytes, other shape
         return s;
       }},
      {"arch", "architecture 'mamba9' is not supported",
       [](gguf::GgufWriter& w) { w.Set("general.architecture", gguf::Value(std::string("mamba9"))); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tag);
    const std::string path = EditedCopy(src, c.tag, c.edit, c.keep, c.reshape);
    const Status st = LoadStatus(path);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find(c.want), std::string::npos) << st.ToString();
    std::remove(path.c_str());
  }
}

// The weight bytes a decode step reads, from the tensor table: every tensor but the embedding (a
// tied head reads it whole, as the output), and of each expert tensor n_expert_used / n_expert.
TEST(ModelFamiliesTest, DecodeReadsOnlyTheChosenExpertsBytes) {
  for (const char* name : {"tiny-q4_k_m.gguf", "tiny-gemma3-q4_k_m.gguf", "tiny-qwen3moe-q4_k_m.gguf"}) {
    SCOPED_TRACE(name);
    const std::string path = ModelFile(name);
    TANDEM_REQUIRE_SHARED(path);
    Result<model::Model> m = model::Model::Load(path);
    ASSERT_TRUE(m.ok());
    const model::ModelParams& p = m->params();
    uint64_t want = 0;
    for (const gguf::TensorInfo& t : m->file().tensors()) {
      if (t.name == "token_embd.weight") {
        if (m->file().FindTensor("output.weight") == nullptr) want += t.n_bytes;  // tied head
      } else if (t.name.find("_exps.") != std::string::npos) {
        want += t.n_bytes / p.n_expert * p.n_expert_used;
      } else {
        want += t.n_bytes;
      }
    }
    EXPECT_EQ(m->DecodeWeightBytes(0, p.n_layer, true), want);
    if (p.is_moe()) {
      EXPECT_LT(m->DecodeWeightBytes(0, p.n_layer, true), m->weight_bytes() / 2);
    }
  }
}

// Mixtral-style llama files (llama.expert_count): with one expert, used by every token with weight
// 1, a layer is exactly the dense llama layer whose FFN that expert is. tiny-q4_k_m rewritten that
// way (each ffn_gate/up/down moved into a one-expert 3-D tensor, a router added) must give the
// dense model's logits.
TEST(ModelFamiliesTest, AOneExpertLlamaMoeEqualsTheDenseModel) {
  const std::string src = ModelFile("tiny-q4_k_m.gguf");
  TANDEM_REQUIRE_SHARED(src);
  Result<gguf::GgufFile> f = gguf::GgufFile::Open(src);
  ASSERT_TRUE(f.ok());
  gguf::GgufWriter w;
  for (const auto& [key, value] : f->metadata()) w.Set(key, value);
  w.Set("llama.expert_count", gguf::Value(uint32_t{1}));
  w.Set("llama.expert_used_count", gguf::Value(uint32_t{1}));
  for (const gguf::TensorInfo& t : f->tensors()) {
    std::string name = t.name;
    std::vector<uint64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    for (const char* part : {"ffn_gate", "ffn_up", "ffn_down"}) {
      const std::string dense = std::string(".") + part + ".weight";
      if (name.size() > dense.size() && name.compare(name.size() - dense.size(), dense.size(), dense) == 0) {
        name = name.substr(0, name.size() - dense.size()) + "." + part + "_exps.weight";
        shape.push_back(1);
      }
    }
    ASSERT_TRUE(w.AddTensor(name, t.type, shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes)).ok()) << name;
    if (name.find(".ffn_norm.weight") != std::string::npos) {
      const std::string router = name.substr(0, name.find(".ffn_norm.weight")) + ".ffn_gate_inp.weight";
      ASSERT_TRUE(w.AddTensor(router, gguf::TensorType::kF32, {t.ne[0], 1}, std::vector<uint8_t>(t.ne[0] * 4, 0)).ok());
    }
  }
  const std::string path = ::testing::TempDir() + "tandem_llama_moe1_" + std::to_string(getpid()) + ".gguf";
  ASSERT_TRUE(w.Write(path).ok());
  Result<model::Model> moe = model::Model::Load(path);
  ASSERT_TRUE(moe.ok()) << moe.status().ToString();
  EXPECT_TRUE(moe->params().is_moe());
  EXPECT_EQ(moe->params().n_ff_exp, moe->params().n_ff);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 20; ++i) tokens.push_back((i * 37 + 1) % 512);
  for (bool flash : {false, true}) {
    EXPECT_EQ(Logits(path, tokens, flash), Logits(src, tokens, flash)) << (flash ? "flash" : "standard");
  }
  std::remove(path.c_str());
}

// qwen2moe = qwen2's attention + routed experts whose weights are the softmax's own + a shared
// expert scaled by sigmoid(x . ffn_gate_inp_shexp). A rewrite of tiny-qwen2 (its FFN in F32)
// whose shared expert is the dense FFN, whose shared gate is zero (sigmoid 0.5) and whose 4
// routed experts are zero must give, to the bit, the logits of the dense model with its FFN down
// matrix halved (exact in F32). Dropping the shared expert, its sigmoid, or adding the routed
// experts' outputs with a wrong weight all change them; so does a missing shared tensor, refused by name.
TEST(ModelFamiliesTest, AQwen2MoeWithASharedExpertEqualsTheDenseModel) {
  const std::string src = ModelFile("tiny-qwen2-f16.gguf");
  TANDEM_REQUIRE_SHARED(src);
  Result<gguf::GgufFile> f = gguf::GgufFile::Open(src);
  ASSERT_TRUE(f.ok());
  Result<model::ModelParams> p = model::ReadParams(*f);
  ASSERT_TRUE(p.ok());
  const uint64_t E = p->n_embd, F = p->n_ff, kExperts = 4, kExpertFF = 32;
  // The tensor as F32 values (times `scale`).
  auto f32 = [](const gguf::TensorInfo& t, float scale) {
    std::vector<float> v(t.n_elements);
    quant::ReferenceOps(t.type)->dequantize_row(t.data, v.data(), static_cast<int64_t>(t.n_elements));
    for (float& x : v) x *= scale;
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return bytes;
  };
  auto ends = [](const std::string& name, const std::string& tail) {
    return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  gguf::GgufWriter dense, moe;
  for (const auto& [key, value] : f->metadata()) {
    dense.Set(key, value);
    if (key == "general.architecture") {
      moe.Set(key, gguf::Value(std::string("qwen2moe")));
    } else if (key.rfind("qwen2.", 0) == 0) {
      moe.Set("qwen2moe." + key.substr(6), value);
    } else {
      moe.Set(key, value);
    }
  }
  moe.Set("qwen2moe.expert_count", gguf::Value(uint32_t{kExperts}));
  moe.Set("qwen2moe.expert_used_count", gguf::Value(uint32_t{2}));
  moe.Set("qwen2moe.expert_feed_forward_length", gguf::Value(uint32_t{kExpertFF}));
  moe.Set("qwen2moe.expert_shared_feed_forward_length", gguf::Value(uint32_t{static_cast<uint32_t>(F)}));
  auto zeros = [](uint64_t n) { return std::vector<uint8_t>(n * 4, 0); };
  for (const gguf::TensorInfo& t : f->tensors()) {
    std::vector<uint64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    const std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
    bool ffn = false;
    for (const char* part : {"ffn_gate", "ffn_up", "ffn_down"}) {
      const std::string tail = std::string(".") + part + ".weight";
      if (!ends(t.name, tail)) continue;
      ffn = true;
      const std::string blk = t.name.substr(0, t.name.size() - tail.size());
      const bool down = std::string(part) == "ffn_down";
      ASSERT_TRUE(dense.AddTensor(t.name, gguf::TensorType::kF32, shape, f32(t, down ? 0.5f : 1.0f)).ok());
      ASSERT_TRUE(moe.AddTensor(blk + "." + part + "_shexp.weight", gguf::TensorType::kF32, shape, f32(t, 1.0f)).ok());
      const std::vector<uint64_t> exps = down ? std::vector<uint64_t>{kExpertFF, E, kExperts}
                                              : std::vector<uint64_t>{E, kExpertFF, kExperts};
      ASSERT_TRUE(moe.AddTensor(blk + "." + part + "_exps.weight", gguf::TensorType::kF32, exps,
                                zeros(E * kExpertFF * kExperts)).ok());
      if (down) {
        ASSERT_TRUE(moe.AddTensor(blk + ".ffn_gate_inp.weight", gguf::TensorType::kF32, {E, kExperts}, zeros(E * kExperts)).ok());
        ASSERT_TRUE(moe.AddTensor(blk + ".ffn_gate_inp_shexp.weight", gguf::TensorType::kF32, {E}, zeros(E)).ok());
      }
    }
    if (ffn) continue;
    ASSERT_TRUE(dense.AddTensor(t.name, t.type, shape, bytes).ok()) << t.name;
    ASSERT_TRUE(moe.AddTensor(t.name, t.type, shape, bytes).ok()) << t.name;
  }
  const std::string tag = std::to_string(getpid());
  const std::string dense_path = ::testing::TempDir() + "tandem_qwen2_dense_" + tag + ".gguf";
  const std::string moe_path = ::testing::TempDir() + "tandem_qwen2moe_" + tag + ".gguf";
  ASSERT_TRUE(dense.Write(dense_path).ok());
  ASSERT_TRUE(moe.Write(moe_path).ok());
  Result<model::Model> m = model::Model::Load(moe_path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->params().is_moe());
  EXPECT_FALSE(m->params().expert_weights_norm);
  EXPECT_EQ(m->params().n_ff_shexp, static_cast<int64_t>(F));
  std::vector<int32_t> tokens;
  for (int i = 0; i < 20; ++i) tokens.push_back((i * 37 + 1) % 500);
  for (bool flash : {false, true}) {
    const std::vector<float> want = Logits(dense_path, tokens, flash), got = Logits(moe_path, tokens, flash);
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(got == want) << (flash ? "flash" : "standard");
  }
  // A file without one of the shared expert's tensors is refused, naming it.
  const std::string broken = EditedCopy(moe_path, "noshexp", [](gguf::GgufWriter&) {},
                                        [](const gguf::TensorInfo& t) { return t.name != "blk.1.ffn_up_shexp.weight"; });
  const Status st = LoadStatus(broken);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("blk.1.ffn_up_shexp.weight"), std::string::npos) << st.ToString();
  for (const std::string& path : {dense_path, moe_path, broken}) std::remove(path.c_str());
}

// A mixture-of-experts decode step gives a token the bits the same token gets in a batch (what
// greedy speculative verification and a server's batches need): with 8 experts per token the
// order in which their outputs are summed matters, and the decode step sums them by expert id as
// the batch path does. (The shared tiny qwen3moe uses 2 experts, whose sum is the same either way.)
// F32 from the map, where the order shows in the last bits (quantized activations would round it
// away before the next matrix); and Q4_K_M copied into memory, where the experts are interleaved
// (where the kernels have that layout) and a decode step's chosen experts go through MatVecBatch's
// one-row kernel while the batch's go through the multi-row one.
TEST(ModelFamiliesTest, MoEDecodeStepsEqualTheSameRowsInABatchToTheBit) {
  std::optional<synth::ModelShape> shape = synth::FindShape("qwen3-30b-a3b");
  ASSERT_TRUE(shape.has_value());
  shape->n_layer = 2;
  shape->n_vocab = 512;
  shape->n_embd = 256;
  shape->n_head = 4;
  shape->n_head_kv = 2;
  shape->head_dim = 64;
  shape->n_expert = 16;
  ASSERT_GE(shape->n_expert_used, 3u);
  for (synth::FileType type : {synth::FileType::kF32, synth::FileType::kQ4_K_M}) {
    const bool copied = type != synth::FileType::kF32;
    shape->n_ff_exp = copied ? 256 : 64;  // Q4_K rows are whole 256-element super-blocks
    const std::string path = ::testing::TempDir() + "tandem_moe_order_" + std::to_string(getpid()) + ".gguf";
    ASSERT_TRUE(synth::MakeModel({*shape, type, 3}, path).ok());
    Result<model::Model> m = model::Model::Load(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    if (copied) {
      ASSERT_TRUE(m->CopyIntoMemory(0, m->params().n_layer, true).ok());
      const model::Matrix& gate = m->layers[0].gate_exps.all;
      const kernels::KernelTable& k = kernels::Best();
      EXPECT_EQ(gate.interleaved, k.gemm_interleaved[static_cast<uint32_t>(gate.type)] != nullptr)
          << gguf::TensorTypeName(gate.type);
    }
    const int64_t V = m->params().n_vocab;
    model::Context alone(*m, 64, 2), batched(*m, 64, 2);
    model::Batch b;
    for (int i = 0; i < 9; ++i) b.Add(i * 37 % 500 + 3, i, 0, i == 8);
    ASSERT_TRUE(alone.Decode(b).ok());
    ASSERT_TRUE(batched.Decode(b).ok());
    std::vector<float> one_at_a_time;
    for (int i = 9; i < 17; ++i) {
      model::Batch step;
      step.Add(i * 53 % 500 + 3, i, 0, true);
      ASSERT_TRUE(alone.Decode(step).ok());
      one_at_a_time.insert(one_at_a_time.end(), alone.logits(), alone.logits() + V);
    }
    model::Batch eight;
    for (int i = 9; i < 17; ++i) eight.Add(i * 53 % 500 + 3, i, 0, true);
    ASSERT_TRUE(batched.Decode(eight).ok());
    ASSERT_EQ(batched.n_logits(), 8);
    EXPECT_EQ(std::memcmp(batched.logits(), one_at_a_time.data(), one_at_a_time.size() * sizeof(float)), 0)
        << synth::FileTypeName(type);
    std::remove(path.c_str());
  }
}

// make-model's new shapes carry every tensor and key the engine reads: shallow copies (fewer
// layers, a small vocabulary, 16 experts instead of 128) load and decode, and their inspect-level
// parameters are the shape's.
TEST(ModelFamiliesTest, MadeModelsOfTheNewShapesLoadAndDecode) {
  struct Case {
    const char* shape;
    uint32_t n_layer, n_expert;
  };
  for (const Case& c : {Case{"gemma-3-1b", 2, 0}, Case{"qwen3-30b-a3b", 1, 16}, Case{"mixtral-8x7b", 1, 4},
                        Case{"qwen1.5-moe-a2.7b", 1, 8}}) {
    SCOPED_TRACE(c.shape);
    std::optional<synth::ModelShape> shape = synth::FindShape(c.shape);
    ASSERT_TRUE(shape.has_value());
    shape->n_layer = c.n_layer;
    shape->n_vocab = 512;
    if (c.n_expert > 0) shape->n_expert = c.n_expert;
    if (std::string(c.shape) == "mixtral-8x7b") shape->n_ff = shape->n_ff_exp = 1024;  // a small test file
    const std::string path = ::testing::TempDir() + "tandem_made_" + c.shape + "_" + std::to_string(getpid()) + ".gguf";
    ASSERT_TRUE(synth::MakeModel({*shape, synth::FileType::kQ4_K_M, 1}, path).ok());
    Result<model::Model> m = model::Model::Load(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const model::ModelParams& p = m->params();
    EXPECT_EQ(p.arch, shape->architecture);
    EXPECT_EQ(p.n_embd, shape->n_embd);
    EXPECT_EQ(p.head_dim, shape->head_dim);
    EXPECT_EQ(p.n_swa, shape->sliding_window);
    EXPECT_EQ(p.n_expert, shape->n_expert);
    EXPECT_EQ(p.n_expert_used, shape->n_expert_used);
    EXPECT_EQ(p.n_ff_exp, shape->n_ff_exp);
    EXPECT_EQ(p.n_ff_shexp, shape->n_ff_shexp);
    EXPECT_EQ(p.qkv_bias, shape->architecture == "qwen2moe");
    model::Context ctx(*m, 64, 2);
    model::Batch b;
    for (int i = 0; i < 8; ++i) b.Add(i * 7 + 1, i, 0, true);
    ASSERT_TRUE(ctx.Decode(b).ok());
    for (int64_t i = 0; i < ctx.n_logits() * p.n_vocab; ++i) ASSERT_TRUE(std::isfinite(ctx.logits()[i])) << i;
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace tandem
