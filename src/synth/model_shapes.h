// Model shapes: the hyperparameters of well-known transformer models (dense, sliding-window and
// mixture-of-experts), for making random-weight GGUF files (benchmarks and planning without
// downloads).
//
// Thread safety: constants and pure functions only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::synth {

struct ModelShape {
  std::string_view name;          // "tinyllama-1.1b"
  std::string_view architecture;  // GGUF general.architecture: "llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "qwen2moe"
  uint32_t n_layer;
  uint32_t n_embd;
  uint32_t n_ff;
  uint32_t n_head;
  uint32_t n_head_kv;
  uint32_t head_dim;
  uint32_t n_vocab;
  uint32_t n_ctx;
  float rope_freq_base;
  float rms_eps;
  bool tied_output;  // no output.weight: the head reuses token_embd.weight
  uint32_t sliding_window = 0;  // gemma3: the local layers' window
  uint32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;  // qwen3moe, qwen2moe, Mixtral
  uint32_t n_ff_shexp = 0;  // qwen2moe: the shared expert's width
};

const std::vector<ModelShape>& KnownShapes();
std::optional<ModelShape> FindShape(std::string_view name);
std::string ShapeNames();  // "tiny, tinyllama-1.1b, ..." for help and errors

}  // namespace tandem::synth
