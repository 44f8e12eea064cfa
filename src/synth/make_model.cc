#include "synth/make_model.h"

#include "synth/vocab.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "quant/quant.h"

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
  // Jumps over n values (the state advances by a constant per value).
  void Skip(uint64_t n) { s_ += n * 0x9E3779B97F4A7C15ull; }

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

// Rows [begin, end) of the uniform stream of `seed`, each converted to `type`.
void FillRows(uint8_t* out, gguf::TensorType type, uint64_t row_len, uint64_t begin, uint64_t end,
              uint64_t seed, float scale) {
  const quant::TypeOps* ops = quant::ReferenceOps(type);
  const size_t row_bytes = quant::RowBytes(type, static_cast<int64_t>(row_len));
  SplitMix64 rng(seed);
  rng.Skip(begin * row_len);
  std::vector<float> row(row_len);
  for (uint64_t r = begin; r < end; ++r) {
    for (float& v : row) v = rng.NextSigned() * scale;
    ops->quantize_row(row.data(), out + r * row_bytes, static_cast<int64_t>(row_len));
  }
}

// A weight matrix of `rows` rows: the same values as FillUniform, stored as `type`, quantized on
// up to hardware_concurrency threads over row ranges.
Status FillMatrix(std::span<uint8_t> out, gguf::TensorType type, uint64_t row_len, uint64_t rows,
                  uint64_t seed, float scale) {
  if (quant::ReferenceOps(type) == nullptr) {
    return Status::Internal("no reference quantizer for " +
                            std::string(gguf::TensorTypeName(type)));
  }
  if (quant::RowBytes(type, static_cast<int64_t>(row_len)) * rows != out.size()) {
    return Status::Internal("tensor size does not match its type and shape");
  }
  constexpr uint64_t kMinRowsPerThread = 16;
  const uint64_t hw = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t n_threads = std::clamp<uint64_t>(rows / kMinRowsPerThread, 1, hw);
  std::vector<std::thread> threads;
  uint64_t begin = 0;
  for (uint64_t t = 0; t < n_threads; ++t) {
    const uint64_t end = rows * (t + 1) / n_threads;
    if (t + 1 == n_threads) {
      FillRows(out.data(), type, row_len, begin, end, seed, scale);  // the last range: this thread
    } else {
      try {
        threads.emplace_back(FillRows, out.data(), type, row_len, begin, end, seed, scale);
      } catch (const std::system_error&) {  // no thread to be had: do the range here
        FillRows(out.data(), type, row_len, begin, end, seed, scale);
      }
    }
    begin = end;
  }
  for (std::thread& t : threads) t.join();
  return Status::Ok();
}

bool UseMoreBits(uint32_t i, uint32_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i >= n / 8 && (i - n / 8) % 3 == 2);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

struct FileTypeEntry {
  FileType type;
  std::string_view name;
  TensorType weights;  // the type of most weight matrices
};
constexpr FileTypeEntry kFileTypes[] = {
    {FileType::kF32, "f32", TensorType::kF32},        {FileType::kF16, "f16", TensorType::kF16},
    {FileType::kBF16, "bf16", TensorType::kBF16},     {FileType::kQ8_0, "q8_0", TensorType::kQ8_0},
    {FileType::kQ6_K, "q6_K", TensorType::kQ6_K},     {FileType::kQ4_0, "q4_0", TensorType::kQ4_0},
    {FileType::kQ4_K_M, "q4_K_M", TensorType::kQ4_K},
};

const FileTypeEntry& Entry(FileType t) {
  for (const FileTypeEntry& e : kFileTypes) {
    if (e.type == t) return e;
  }
  return kFileTypes[0];  // unreachable for enumerators
}

Status FillOnes(std::span<uint8_t> out) {
  const float one = 1.0f;
  for (size_t i = 0; i + sizeof(float) <= out.size(); i += sizeof(float)) {
    std::memcpy(out.data() + i, &one, sizeof(float));
  }
  return Status::Ok();
}

}  // namespace

std::optional<FileType> ParseFileType(std::string_view name) {
  for (const FileTypeEntry& e : kFileTypes) {
    if (e.name.size() == name.size() &&
        std::equal(name.begin(), name.end(), e.name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) ==
                 std::tolower(static_cast<unsigned char>(b));
        })) {
      return e.type;
    }
  }
  return std::nullopt;
}

std::string_view FileTypeName(FileType t) {
  return Entry(t).name;
}

std::string FileTypeNames() {
  std::string out;
  for (const FileTypeEntry& e : kFileTypes) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

TensorType TensorTypeFor(FileType t, std::string_view name, uint32_t layer, uint32_t n_layer,
                         uint64_t row_len, bool tied_output) {
  TensorType type = Entry(t).weights;
  const bool quantized = t != FileType::kF32 && t != FileType::kF16 && t != FileType::kBF16;
  if (!quantized) return type;
  const bool is_output = name == "output.weight" || (tied_output && name == "token_embd.weight");
  if (is_output) {
    if (type != TensorType::kQ8_0) type = TensorType::kQ6_K;
  } else if (t == FileType::kQ4_K_M &&
             (EndsWith(name, ".attn_v.weight") || EndsWith(name, ".ffn_down.weight") ||
              EndsWith(name, ".ffn_down_exps.weight")) &&
             UseMoreBits(layer, n_layer)) {
    type = TensorType::kQ6_K;
  }
  if (row_len % quant::kQKK != 0) {
    if (type == TensorType::kQ4_K) type = TensorType::kQ5_0;
    if (type == TensorType::kQ6_K) type = TensorType::kQ8_0;
  }
  return type;
}

Result<gguf::GgufWriter> BuildModel(const MakeModelOptions& o) {
  const ModelShape& s = o.shape;
  gguf::GgufWriter w;
  const std::string a(s.architecture);
  w.Set("general.architecture", a);
  w.Set("general.name", std::string("tandem random ") + std::string(s.name));
  w.Set("general.file_type", static_cast<uint32_t>(o.type));
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
  if (s.sliding_window > 0) w.Set(a + ".attention.sliding_window", s.sliding_window);
  if (s.n_expert > 0) {
    w.Set(a + ".expert_count", s.n_expert);
    w.Set(a + ".expert_used_count", s.n_expert_used);
    // Mixtral's llama files have no such key: their experts are feed_forward_length wide.
    if (s.architecture != "llama") w.Set(a + ".expert_feed_forward_length", s.n_ff_exp);
    if (s.n_ff_shexp > 0) w.Set(a + ".expert_shared_feed_forward_length", s.n_ff_shexp);
  }
  AddSyntheticVocab(w, s.n_vocab);

  const uint64_t q_dim = uint64_t{s.n_head} * s.head_dim;
  const uint64_t kv_dim = uint64_t{s.n_head_kv} * s.head_dim;
  uint64_t tensor_seed = o.seed * 0x100000001B3ull;
  uint32_t layer = 0;
  auto matrix = [&](std::string name, uint64_t fan_in, uint64_t rows) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(fan_in));
    const uint64_t seed = ++tensor_seed;
    const TensorType type = TensorTypeFor(o.type, name, layer, s.n_layer, fan_in, s.tied_output);
    return w.AddTensor(std::move(name), type, {fan_in, rows},
                       [type, fan_in, rows, seed, scale](std::span<uint8_t> out) {
                         return FillMatrix(out, type, fan_in, rows, seed, scale);
                       });
  };
  // n_expert matrices of `rows` rows in one 3-D tensor [fan_in, rows, n_expert].
  auto experts = [&](std::string name, uint64_t fan_in, uint64_t rows) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(fan_in));
    const uint64_t seed = ++tensor_seed, all = rows * s.n_expert;
    const TensorType type = TensorTypeFor(o.type, name, layer, s.n_layer, fan_in, s.tied_output);
    return w.AddTensor(std::move(name), type, {fan_in, rows, s.n_expert},
                       [type, fan_in, all, seed, scale](std::span<uint8_t> out) {
                         return FillMatrix(out, type, fan_in, all, seed, scale);
                       });
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
    layer = l;
    const std::string p = "blk." + std::to_string(l) + ".";
    TANDEM_RETURN_IF_ERROR(vector(p + "attn_norm.weight", s.n_embd));
    TANDEM_RETURN_IF_ERROR(matrix(p + "attn_q.weight", s.n_embd, q_dim));
    TANDEM_RETURN_IF_ERROR(matrix(p + "attn_k.weight", s.n_embd, kv_dim));
    TANDEM_RETURN_IF_ERROR(matrix(p + "attn_v.weight", s.n_embd, kv_dim));
    if (s.architecture == "qwen2" || s.architecture == "qwen2moe") {
      TANDEM_RETURN_IF_ERROR(bias(p + "attn_q.bias", q_dim));
      TANDEM_RETURN_IF_ERROR(bias(p + "attn_k.bias", kv_dim));
      TANDEM_RETURN_IF_ERROR(bias(p + "attn_v.bias", kv_dim));
    }
    if (s.architecture == "qwen3" || s.architecture == "qwen3moe" || s.architecture == "gemma3") {
      TANDEM_RETURN_IF_ERROR(vector(p + "attn_q_norm.weight", s.head_dim));
      TANDEM_RETURN_IF_ERROR(vector(p + "attn_k_norm.weight", s.head_dim));
    }
    TANDEM_RETURN_IF_ERROR(matrix(p + "attn_output.weight", q_dim, s.n_embd));
    if (s.architecture == "gemma3") TANDEM_RETURN_IF_ERROR(vector(p + "post_attention_norm.weight", s.n_embd));
    TANDEM_RETURN_IF_ERROR(vector(p + "ffn_norm.weight", s.n_embd));
    if (s.n_expert > 0) {
      // The router stays f32, as converted files keep it.
      const uint64_t seed = ++tensor_seed;
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
      TANDEM_RETURN_IF_ERROR(w.AddTensor(p + "ffn_gate_inp.weight", TensorType::kF32, {s.n_embd, s.n_expert},
                                         [seed, scale](std::span<uint8_t> out) { return FillUniform(out, seed, scale); }));
      TANDEM_RETURN_IF_ERROR(experts(p + "ffn_gate_exps.weight", s.n_embd, s.n_ff_exp));
      TANDEM_RETURN_IF_ERROR(experts(p + "ffn_up_exps.weight", s.n_embd, s.n_ff_exp));
      TANDEM_RETURN_IF_ERROR(experts(p + "ffn_down_exps.weight", s.n_ff_exp, s.n_embd));
      if (s.n_ff_shexp > 0) {  // qwen2moe's shared expert, its gate vector f32 as converted files keep it
        TANDEM_RETURN_IF_ERROR(bias(p + "ffn_gate_inp_shexp.weight", s.n_embd));
        TANDEM_RETURN_IF_ERROR(matrix(p + "ffn_gate_shexp.weight", s.n_embd, s.n_ff_shexp));
        TANDEM_RETURN_IF_ERROR(matrix(p + "ffn_up_shexp.weight", s.n_embd, s.n_ff_shexp));
        TANDEM_RETURN_IF_ERROR(matrix(p + "ffn_down_shexp.weight", s.n_ff_shexp, s.n_embd));
      }
    } else {
      TANDEM_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff));
      TANDEM_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", s.n_embd, s.n_ff));
      TANDEM_RETURN_IF_ERROR(matrix(p + "ffn_down.weight", s.n_ff, s.n_embd));
    }
    if (s.architecture == "gemma3") TANDEM_RETURN_IF_ERROR(vector(p + "post_ffw_norm.weight", s.n_embd));
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
