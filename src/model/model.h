// Model: the weights of a decoder-only transformer (llama, qwen2, qwen3), used in place from the
// memory-mapped GGUF file, with every tensor's presence, type and shape checked at load.
//
// Matrices are GGUF tensors of shape [cols, rows]: `rows` rows of `cols` elements, each row one
// output of a matrix-vector product. Norm weights and biases must be F32.
//
// Thread safety: immutable after Load(); share freely between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/reader.h"
#include "model/params.h"
#include "quant/quant.h"

namespace tandem::model {

struct Matrix {
  quant::TensorType type = quant::TensorType::kF32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
};

struct LayerWeights {
  const float* attn_norm = nullptr;                      // [n_embd]
  Matrix wq, wk, wv, wo;                                 // [n_embd -> q_dim], kv_dim, kv_dim, [q_dim -> n_embd]
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // qwen2 biases
  const float *q_norm = nullptr, *k_norm = nullptr;      // qwen3 per-head norms [head_dim]
  const float* ffn_norm = nullptr;                       // [n_embd]
  Matrix gate, up, down;                                 // [n_embd -> n_ff] x2, [n_ff -> n_embd]
};

class Model {
 public:
  static Result<Model> Load(const std::string& path);

  Model(Model&&) = default;
  Model& operator=(Model&&) = default;

  const ModelParams& params() const { return params_; }
  const gguf::GgufFile& file() const { return file_; }

  Matrix token_embd;                 // [n_embd, n_vocab]: one row per token
  const float* output_norm = nullptr;
  Matrix output;                     // [n_embd -> n_vocab]; token_embd when tied
  const float* rope_freqs = nullptr;  // optional [head_dim / 2] divisors (Llama 3.1)
  std::vector<LayerWeights> layers;

  // Bytes of weights mapped (for the memory report at load).
  uint64_t weight_bytes() const { return weight_bytes_; }

 private:
  Model(gguf::GgufFile file, ModelParams params) : file_(std::move(file)), params_(params) {}
  Status Bind();

  gguf::GgufFile file_;
  ModelParams params_;
  uint64_t weight_bytes_ = 0;
};

}  // namespace tandem::model
