#include "gguf/summary.h"

#include <charconv>

namespace tandem::gguf {
namespace {

std::optional<uint64_t> OptUint(const GgufFile& f, const std::string& key) {
  Result<int64_t> v = f.GetInt(key);
  if (!v.ok() || *v < 0) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

std::optional<double> OptFloat(const GgufFile& f, const std::string& key) {
  Result<double> v = f.GetFloat(key);
  if (!v.ok()) return std::nullopt;
  return *v;
}

}  // namespace

std::optional<uint64_t> LayerOfTensor(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view rest = name.substr(kPrefix.size());
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
  if (ec != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '.') {
    return std::nullopt;
  }
  return n;
}

ModelSummary Summarize(const GgufFile& f) {
  ModelSummary s;
  s.architecture = f.GetString("general.architecture").value_or("");
  s.name = f.GetString("general.name").value_or("");
  const std::string a = s.architecture + ".";
  s.n_layer = OptUint(f, a + "block_count");
  s.n_embd = OptUint(f, a + "embedding_length");
  s.n_ff = OptUint(f, a + "feed_forward_length");
  s.n_head = OptUint(f, a + "attention.head_count");
  s.n_head_kv = OptUint(f, a + "attention.head_count_kv");
  if (!s.n_head_kv) s.n_head_kv = s.n_head;  // no GQA unless stated
  s.head_dim = OptUint(f, a + "attention.key_length");
  if (!s.head_dim && s.n_embd && s.n_head && *s.n_head > 0) s.head_dim = *s.n_embd / *s.n_head;
  s.n_ctx = OptUint(f, a + "context_length");
  s.n_vocab = OptUint(f, a + "vocab_size");
  if (!s.n_vocab) {
    Result<const Array*> tokens = f.GetArray("tokenizer.ggml.tokens");
    if (tokens.ok()) s.n_vocab = (*tokens)->size();
  }
  s.rope_freq_base = OptFloat(f, a + "rope.freq_base");
  s.rms_eps = OptFloat(f, a + "attention.layer_norm_rms_epsilon");

  std::map<uint32_t, TypeTotal> by_type;
  for (const TensorInfo& t : f.tensors()) {
    s.n_params += t.n_elements;
    s.tensor_bytes += t.n_bytes;
    TypeTotal& tt = by_type[static_cast<uint32_t>(t.type)];
    tt.type = t.type;
    tt.tensors += 1;
    tt.bytes += t.n_bytes;
    if (std::optional<uint64_t> layer = LayerOfTensor(t.name)) {
      s.layer_bytes[*layer] += t.n_bytes;
    } else {
      s.non_layer_bytes += t.n_bytes;
      s.non_layer_tensors.push_back(t.name);
    }
  }
  for (const auto& [id, tt] : by_type) s.by_type.push_back(tt);
  return s;
}

}  // namespace tandem::gguf
