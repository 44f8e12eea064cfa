// ModelParams: the hyperparameters of a decoder-only transformer, read from GGUF metadata, and
// the per-architecture differences (RoPE pair order, Q/K/V biases, per-head Q/K norms).
//
// Thread safety: values.
#pragma once

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

struct ModelParams {
  std::string arch;  // "llama", "qwen2", "qwen3"
  int64_t n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_vocab = 0, n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;  // linear position scaling: positions are divided by this
  RopeOrder rope_order = RopeOrder::kAdjacent;
  bool qkv_bias = false;  // qwen2
  bool qk_norm = false;   // qwen3: RMSNorm over each Q and K head

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
};

// The architectures (general.architecture) this engine runs, and whether `arch` is one of them.
// ReadParams refuses every other one with kUnsupported, naming it.
extern const char* const kSupportedArchitectures;  // "llama, qwen2, qwen3", for messages
bool IsSupportedArchitecture(std::string_view arch);

// Reads and checks the hyperparameters. Unsupported architectures are an error naming them and
// the supported ones.
Result<ModelParams> ReadParams(const gguf::GgufFile& file);

}  // namespace tandem::model
