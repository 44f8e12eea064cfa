// Model: the weights of a decoder-only transformer (llama, qwen2, qwen3), used in place from the
// memory-mapped GGUF file, with every tensor's presence, type and shape checked at load.
//
// Matrices are GGUF tensors of shape [cols, rows]: `rows` rows of `cols` elements, each row one
// output of a matrix-vector product. Norm weights and biases must be F32.
//
// Thread safety: immutable after Load(); share freely between threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/large_buffer.h"
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

  // Copies the matrices that layers [layer_begin, layer_end) compute with, and the output head when
  // `head`, out of the file map into anonymous memory on transparent huge pages, and points the
  // weights there (`--no-mmap`). Streaming weights from 2 MiB pages costs far fewer TLB misses
  // than from 4 KiB file pages, which shows most when several processes share the cores. The token
  // embedding stays mapped: only a few of its rows are read per token. Matrices copied by an
  // earlier call stay where they are, so calls for several ranges add up. Must not run while
  // anything reads the weights. `progress(done, total)` is called every few hundred MiB and at
  // the end; returning false cancels (Status kCancelled) and leaves the weights as they were.
  Status CopyIntoMemory(int64_t layer_begin, int64_t layer_end, bool head,
                        const std::function<bool(uint64_t done, uint64_t total)>& progress = {});
  // Bytes CopyIntoMemory copied (0 when the weights are used from the map).
  uint64_t copied_bytes() const { return copied_bytes_; }

 private:
  Model(gguf::GgufFile file, ModelParams params) : file_(std::move(file)), params_(params) {}
  Status Bind();

  gguf::GgufFile file_;
  ModelParams params_;
  uint64_t weight_bytes_ = 0;
  std::vector<LargeBuffer> resident_;  // one per CopyIntoMemory call that copied anything
  uint64_t copied_bytes_ = 0;
};

}  // namespace tandem::model
