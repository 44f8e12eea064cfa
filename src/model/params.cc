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

const char* const kSupportedArchitectures = "llama, qwen2, qwen3, gemma3, qwen3moe, qwen2moe";

bool IsSupportedArchitecture(std::string_view arch) {
  return arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "gemma3" || arch == "qwen3moe" ||
         arch == "qwen2moe";
}

float ModelParams::AttentionScale() const {
  return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

Result<ModelParams> ReadParams(const gguf::GgufFile& f) {
  ModelParams p;
  TANDEM_ASSIGN_OR_RETURN(p.arch, f.GetString("general.architecture"));
  if (p.arch == "llama") {
    p.rope_order = RopeOrder::kAdjacent;
  } else if (p.arch == "qwen2" || p.arch == "qwen2moe") {
    p.rope_order = RopeOrder::kHalves;
    p.qkv_bias = true;
  } else if (p.arch == "qwen3" || p.arch == "qwen3moe") {
    p.rope_order = RopeOrder::kHalves;
    p.qk_norm = true;
  } else if (p.arch == "gemma3") {
    p.rope_order = RopeOrder::kHalves;
    p.qk_norm = true;
    p.embd_scale = true;
    p.post_norms = true;
    p.ffn_act = FfnActivation::kGelu;
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
  if (p.arch == "gemma3") {
    // Converted Gemma 3 files carry the window but not the pattern or the local RoPE base: Gemma
    // 3's are every 6th layer global and 10000.
    TANDEM_ASSIGN_OR_RETURN(p.n_swa, Positive(f, a + "attention.sliding_window"));
    p.swa_period = f.GetInt(a + "attention.sliding_window_pattern").value_or(6);
    if (p.swa_period < 0 || p.swa_period > 65536) {
      return Status::Corruption("attention.sliding_window_pattern " + std::to_string(p.swa_period) + " is out of range");
    }
    p.rope_base_swa = static_cast<float>(f.GetFloat(a + "rope.freq_base_swa").value_or(10000.0));
    p.logit_softcap = static_cast<float>(f.GetFloat(a + "final_logit_softcapping").value_or(0.0));
    if (!(p.logit_softcap >= 0) || !(p.rope_base_swa > 0)) return Status::Corruption("gemma3 soft-cap or local RoPE base out of range");
    // Gemma 3 27B (62 layers) scales queries by 1/sqrt(n_embd / n_head), the others by
    // 1/sqrt(head size) (query_pre_attn_scalar; the converted files do not say).
    if (p.n_layer == 62) p.attn_scale = 1.0f / std::sqrt(static_cast<float>(p.n_embd / p.n_head));
  }
  if (p.arch == "qwen3moe") {
    TANDEM_ASSIGN_OR_RETURN(p.n_expert, Positive(f, a + "expert_count"));
    TANDEM_ASSIGN_OR_RETURN(p.n_expert_used, Positive(f, a + "expert_used_count"));
    TANDEM_ASSIGN_OR_RETURN(p.n_ff_exp, Positive(f, a + "expert_feed_forward_length"));
    p.expert_weights_norm = true;  // Qwen3-MoE always renormalises the chosen experts' weights
  }
  if (p.arch == "qwen2moe") {
    TANDEM_ASSIGN_OR_RETURN(p.n_expert, Positive(f, a + "expert_count"));
    TANDEM_ASSIGN_OR_RETURN(p.n_expert_used, Positive(f, a + "expert_used_count"));
    TANDEM_ASSIGN_OR_RETURN(p.n_ff_exp, Positive(f, a + "expert_feed_forward_length"));
    // The shared expert's width; files without the key use feed_forward_length.
    p.n_ff_shexp = f.Find(a + "expert_shared_feed_forward_length")
                       ? Positive(f, a + "expert_shared_feed_forward_length").value_or(0)
                       : p.n_ff;
    if (p.n_ff_shexp <= 0) return Status::Corruption("qwen2moe.expert_shared_feed_forward_length is out of range");
    p.expert_weights_norm = false;  // Qwen1.5-MoE and Qwen2-MoE keep the softmax's weights
  }
  if (p.arch == "llama" && f.Find(a + "expert_count")) {
    // Mixtral-style: llama attention, experts as wide as feed_forward_length, and a softmax over
    // the chosen experts' router logits, which is the renormalised top-k of the full softmax.
    TANDEM_ASSIGN_OR_RETURN(p.n_expert, Positive(f, a + "expert_count"));
    TANDEM_ASSIGN_OR_RETURN(p.n_expert_used, Positive(f, a + "expert_used_count"));
    p.n_ff_exp = p.n_ff;
    p.expert_weights_norm = true;
  }
  if (p.is_moe() && (p.n_expert > 1024 || p.n_expert_used > p.n_expert)) {
    return Status::Corruption("expert_count " + std::to_string(p.n_expert) + " and expert_used_count " +
                              std::to_string(p.n_expert_used) + " are out of range (1 <= used <= count <= 1024)");
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
