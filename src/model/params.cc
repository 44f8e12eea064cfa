#include "model/params.h"

namespace tandem::model {
namespace {

Result<int64_t> Positive(const gguf::GgufFile& f, const std::string& key) {
  TANDEM_ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
  if (v <= 0 || v > (int64_t{1} << 40)) {
    return Status::Corruption("metadata " + key + " = " + std::to_string(v) + " is out of range");
  }
  return v;
}

}  // namespace

const char* const kSupportedArchitectures = "llama, qwen2, qwen3";

bool IsSupportedArchitecture(std::string_view arch) {
  return arch == "llama" || arch == "qwen2" || arch == "qwen3";
}

Result<ModelParams> ReadParams(const gguf::GgufFile& f) {
  ModelParams p;
  TANDEM_ASSIGN_OR_RETURN(p.arch, f.GetString("general.architecture"));
  if (p.arch == "llama") {
    p.rope_order = RopeOrder::kAdjacent;
  } else if (p.arch == "qwen2") {
    p.rope_order = RopeOrder::kHalves;
    p.qkv_bias = true;
  } else if (p.arch == "qwen3") {
    p.rope_order = RopeOrder::kHalves;
    p.qk_norm = true;
  } else {
    return Status::Unsupported("architecture '" + p.arch +
                               "' is not supported (supported: " + kSupportedArchitectures + ")");
  }
  const std::string a = p.arch + ".";
  TANDEM_ASSIGN_OR_RETURN(p.n_layer, Positive(f, a + "block_count"));
  TANDEM_ASSIGN_OR_RETURN(p.n_embd, Positive(f, a + "embedding_length"));
  TANDEM_ASSIGN_OR_RETURN(p.n_ff, Positive(f, a + "feed_forward_length"));
  TANDEM_ASSIGN_OR_RETURN(p.n_head, Positive(f, a + "attention.head_count"));
  p.n_head_kv = f.Find(a + "attention.head_count_kv") ? Positive(f, a + "attention.head_count_kv").value_or(0) : p.n_head;
  if (p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0) {
    return Status::Corruption("head_count " + std::to_string(p.n_head) +
                              " is not a multiple of head_count_kv " + std::to_string(p.n_head_kv));
  }
  p.head_dim = f.Find(a + "attention.key_length") ? Positive(f, a + "attention.key_length").value_or(0)
                                                  : p.n_embd / p.n_head;
  if (p.head_dim <= 0 || p.head_dim % 2 != 0) {
    return Status::Corruption("head size " + std::to_string(p.head_dim) + " must be even and positive");
  }
  p.n_ctx_train = f.GetInt(a + "context_length").value_or(2048);
  p.rms_eps = static_cast<float>(f.GetFloat(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  p.rope_base = static_cast<float>(f.GetFloat(a + "rope.freq_base").value_or(10000.0));
  if (f.GetString(a + "rope.scaling.type").value_or("none") == "linear") {
    p.rope_scale = static_cast<float>(f.GetFloat(a + "rope.scaling.factor").value_or(1.0));
    if (!(p.rope_scale > 0)) return Status::Corruption("rope.scaling.factor must be positive");
  }
  if (f.Find(a + "vocab_size")) {
    TANDEM_ASSIGN_OR_RETURN(p.n_vocab, Positive(f, a + "vocab_size"));
  } else {
    const gguf::TensorInfo* emb = f.FindTensor("token_embd.weight");
    if (emb == nullptr) return Status::NotFound("tensor 'token_embd.weight' is missing");
    p.n_vocab = static_cast<int64_t>(emb->ne[1]);
  }
  return p;
}

}  // namespace tandem::model
