// ModelParams: the hyperparameters of a decoder-only transformer, read from GGUF metadata, and
// the per-architecture differences:
//   llama    the base: RMSNorm, RoPE (adjacent pairs), SiLU-gated FFN
//   qwen2    + Q/K/V biases, RoPE in halves
//   qwen3    + per-head RMSNorm on Q and K, no biases
//   gemma3   qwen3's attention with the embedding scaled by sqrt(n_embd), RMSNorm after the
//            attention and after the FFN too, a GELU-gated FFN, sliding-window attention on the
//            local layers (every swa_period-th layer is global) with their own RoPE base, an
//            optional final logit soft-cap
//   qwen3moe qwen3's attention with a mixture-of-experts FFN: a router, the top experts_used of
//            n_expert SiLU-gated experts per token, their weights renormalised
//   qwen2moe qwen2's attention with a mixture of experts whose chosen weights are the softmax's
//            own (not renormalised), plus a shared expert every token goes through, scaled by
//            sigmoid(x . ffn_gate_inp_shexp)
//   llama with llama.expert_count (Mixtral): llama's attention, the same experts, each as wide
//            as feed_forward_length
//
// Thread safety: values.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/reader.h"

namespace tandem::model {

enum class RopeOrder {
  kAdjacent,  // pairs (x[2i], x[2i+1]): GGUF llama (the converter permutes Q/K rows)
  kHalves,    // pairs (x[i], x[i + d/2]): qwen2, qwen3 ("neox" order)
};

enum class FfnActivation {
  kSilu,  // silu(gate) * up
  kGelu,  // gelu(gate) * up, GELU's tanh approximation (Gemma)
};

struct ModelParams {
  std::string arch;  // "llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "qwen2moe"
  int64_t n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_vocab = 0, n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;  // linear position scaling: positions are divided by this
  RopeOrder rope_order = RopeOrder::kAdjacent;
  bool qkv_bias = false;  // qwen2
  bool qk_norm = false;   // qwen3: RMSNorm over each Q and K head
  // Gemma 3.
  bool embd_scale = false;   // the input embedding times sqrt(n_embd)
  bool post_norms = false;   // RMSNorm of the attention's and of the FFN's output before each residual add
  FfnActivation ffn_act = FfnActivation::kSilu;
  float attn_scale = 0;      // query scale; 0: 1/sqrt(head_dim)
  int64_t n_swa = 0;         // sliding window: a local layer's token at p sees positions > p - n_swa; 0: none
  int64_t swa_period = 0;    // layer il is global when il % swa_period == swa_period - 1
  float rope_base_swa = 10000.0f;  // RoPE base of the local layers
  float logit_softcap = 0;   // final logits = c * tanh(logits / c); 0: none
  // Mixture of experts (qwen3moe, qwen2moe, Mixtral-style llama).
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  bool expert_weights_norm = false;  // the chosen experts' weights renormalised to sum 1
  int64_t n_ff_shexp = 0;            // qwen2moe: the shared expert's width (0: no shared expert)

  bool is_moe() const { return n_expert > 0; }
  // Whether layer il attends through the sliding window.
  bool IsLocalLayer(int64_t il) const { return n_swa > 0 && (swa_period <= 0 || il % swa_period != swa_period - 1); }
  float AttentionScale() const;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
};

// The architectures (general.architecture) this engine runs, and whether `arch` is one of them.
// ReadParams refuses every other one with kUnsupported, naming it.
extern const char* const kSupportedArchitectures;  // "llama, qwen2, qwen3, gemma3, qwen3moe, qwen2moe"
bool IsSupportedArchitecture(std::string_view arch);

// Reads and checks the hyperparameters. Unsupported architectures are an error naming them and
// the supported ones.
Result<ModelParams> ReadParams(const gguf::GgufFile& file);

}  // namespace tandem::model
