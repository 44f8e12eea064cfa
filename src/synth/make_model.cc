#include "synth/make_model.h"

#include <cmath>
#include <cstring>

namespace tandem::synth {
namespace {

using gguf::TensorType;

// SplitMix64: a small, fast, well-mixed generator; deterministic across platforms.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float NextSigned() { return static_cast<float>(Next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }

 private:
  uint64_t s_;
};

Status FillUniform(std::span<uint8_t> out, uint64_t seed, float scale) {
  SplitMix64 rng(seed);
  const size_t n = out.size() / sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    float v = rng.NextSigned() * scale;
    std::memcpy(out.data() + i * sizeof(float), &v, sizeof(float));
  }
  return Status::Ok();
}

Status FillOnes(std::span<uint8_t> out) {
  const float one = 1.0f;
  for (size_t i = 0; i + sizeof(float) <= out.size(); i += sizeof(float)) {
    std::memcpy(out.data() + i, &one, sizeof(float));
  }
  return Status::Ok();
}

}  // namespace

Result<gguf::GgufWriter> BuildModel(const MakeModelOptions& o) {
  const ModelShape& s = o.shape;
  if (o.type != TensorType::kF32) {
    return Status::Unsupported("make-model writes f32 weights so far; quantized types arrive with "
                               "the quantization module");
  }
  gguf::GgufWriter w;
  const std::string a(s.architecture);
  w.Set("general.architecture", a);
  w.Set("general.name", std::string("tandem random ") + std::string(s.name));
  w.Set("general.file_type", uint32_t{0});  // all F32
  w.Set(a + ".block_count", s.n_layer);
  w.Set(a + ".context_length", s.n_ctx);
  w.Set(a + ".embedding_length", s.n_embd);
  w.Set(a + ".feed_forward_length", s.n_ff);
  w.Set(a + ".attention.head_count", s.n_head);
  w.Set(a + ".attention.head_count_kv", s.n_head_kv);
  w.Set(a + ".attention.key_length", s.head_dim);
  w.Set(a + ".attention.value_length", s.head_dim);
  w.Set(a + ".rope.dimension_count", s.head_dim);
  w.Set(a + ".rope.freq_base", s.rope_freq_base);
  w.Set(a + ".attention.layer_norm_rms_epsilon", s.rms_eps);
  w.Set(a + ".vocab_size", s.n_vocab);

  const uint64_t q_dim = uint64_t{s.n_head} * s.head_dim;
  const uint64_t kv_dim = uint64_t{s.n_head_kv} * s.head_dim;
  uint64_t tensor_seed = o.seed * 0x100000001B3ull;
  auto matrix = [&](std::string name, uint64_t fan_in, uint64_t rows) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(fan_in));
    const uint64_t seed = ++tensor_seed;
    return w.AddTensor(std::move(name), o.type, {fan_in, rows},
                       [seed, scale](std::span<uint8_t> out) { return FillUniform(out, seed, scale); });
  };
  auto vector = [&](std::string name, uint64_t n) {
    return w.AddTensor(std::move(name), TensorType::kF32, {n}, FillOnes);
  };
  auto bias = [&](std::string name, uint64_t n) {
    const uint64_t seed = ++tensor_seed;
    return w.AddTensor(std::move(name), TensorType::kF32, {n},
                       [seed](std::span<uint8_t> out) { return FillUniform(out, seed, 0.1f); });
  };

  // token_embd: [n_embd, n_vocab]; one row of n_embd per token.
  TANDEM_RETURN_IF_ERROR(matrix("token_embd.weight", s.n_embd, s.n_vocab));
  for (uint32_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    TANDEM_RETURN_IF_ERROR(vector(p + "attn_norm.weight", s.n_embd));
    TANDEM_RETURN_IF_ERROR(matrix(p + "attn_q.weight", s.n_embd, q_dim));
    TANDEM_RETURN_IF_ERROR(matrix(p + "attn_k.weight", s.n_embd, kv_dim));
    TANDEM_RETURN_IF_ERROR(matrix(p + "attn_v.weight", s.n_embd, kv_dim));
    if (s.architecture == "qwen2") {
      TANDEM_RETURN_IF_ERROR(bias(p + "attn_q.bias", q_dim));
      TANDEM_RETURN_IF_ERROR(bias(p + "attn_k.bias", kv_dim));
      TANDEM_RETURN_IF_ERROR(bias(p + "attn_v.bias", kv_dim));
    }
    if (s.architecture == "qwen3") {
      TANDEM_RETURN_IF_ERROR(vector(p + "attn_q_norm.weight", s.head_dim));
      TANDEM_RETURN_IF_ERROR(vector(p + "attn_k_norm.weight", s.head_dim));
    }
    TANDEM_RETURN_IF_ERROR(matrix(p + "attn_output.weight", q_dim, s.n_embd));
    TANDEM_RETURN_IF_ERROR(vector(p + "ffn_norm.weight", s.n_embd));
    TANDEM_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff));
    TANDEM_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", s.n_embd, s.n_ff));
    TANDEM_RETURN_IF_ERROR(matrix(p + "ffn_down.weight", s.n_ff, s.n_embd));
  }
  TANDEM_RETURN_IF_ERROR(vector("output_norm.weight", s.n_embd));
  if (!s.tied_output) TANDEM_RETURN_IF_ERROR(matrix("output.weight", s.n_embd, s.n_vocab));
  return w;
}

Status MakeModel(const MakeModelOptions& options, const std::string& path,
                 const std::function<void(size_t, size_t)>& progress) {
  TANDEM_ASSIGN_OR_RETURN(gguf::GgufWriter w, BuildModel(options));
  return w.Write(path, progress);
}

}  // namespace tandem::synth
