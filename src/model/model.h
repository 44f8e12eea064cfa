// Model: the weights of a decoder-only transformer (llama, qwen2, qwen3, gemma3, qwen3moe, qwen2moe; see
// model/params.h), used in place from the memory-mapped GGUF file, with every tensor's presence,
// type and shape checked at load.
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
  // The rows are in the interleaved layout of kernels/interleave.h (set by CopyIntoMemory when
  // the CPU's kernels have it), not the file's.
  bool interleaved = false;
};

// The experts of one mixture-of-experts matrix, stored as one 3-D tensor [cols, rows, n_expert]:
// expert e is the rows x cols matrix at e * (its bytes).
struct ExpertMatrices {
  Matrix all;  // every expert's rows, one after the other: rows = n_expert * expert rows
  int64_t n_expert = 0;
  Matrix Expert(int64_t e) const {
    const int64_t rows = all.rows / n_expert;
    const size_t bytes = quant::RowBytes(all.type, all.cols) * static_cast<size_t>(rows);
    // Interleaved: each expert's rows are whole groups of 16 (CopyIntoMemory checks), so an
    // expert starts at a group and is itself an interleaved matrix.
    return Matrix{all.type, static_cast<const uint8_t*>(all.data) + bytes * e, rows, all.cols, all.interleaved};
  }
};

struct LayerWeights {
  const float* attn_norm = nullptr;                      // [n_embd]
  Matrix wq, wk, wv, wo;                                 // [n_embd -> q_dim], kv_dim, kv_dim, [q_dim -> n_embd]
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // qwen2 biases
  const float *q_norm = nullptr, *k_norm = nullptr;      // qwen3 per-head norms [head_dim]
  const float* post_attn_norm = nullptr;                 // gemma3: on the attention output [n_embd]
  const float* ffn_norm = nullptr;                       // [n_embd]
  Matrix gate, up, down;                                 // [n_embd -> n_ff] x2, [n_ff -> n_embd]
  const float* post_ffn_norm = nullptr;                  // gemma3: on the FFN output [n_embd]
  // Mixture of experts (instead of gate/up/down): the router [n_embd -> n_expert] and the experts
  // [n_embd -> n_ff_exp] x2, [n_ff_exp -> n_embd].
  Matrix router;
  ExpertMatrices gate_exps, up_exps, down_exps;
  // qwen2moe's shared expert: [n_embd -> n_ff_shexp] x2, [n_ff_shexp -> n_embd], and the vector
  // whose dot with the token gives its weight through a sigmoid [n_embd].
  Matrix gate_shexp, up_shexp, down_shexp;
  const float* shexp_gate_inp = nullptr;
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
  // Bytes of weights one decode step reads in layers [layer_begin, layer_end) and, with `head`,
  // the output norm and head: every matrix and norm it multiplies with, and with experts the
  // router and n_expert_used of the n_expert experts (the rest are never touched). The
  // embedding's one row is left out. For bandwidth rooflines.
  uint64_t DecodeWeightBytes(int64_t layer_begin, int64_t layer_end, bool head) const;

  // Copies the matrices that layers [layer_begin, layer_end) compute with, and the output head when
  // `head`, out of the file map into anonymous memory on transparent huge pages, and points the
  // weights there (`--no-mmap`). Streaming weights from 2 MiB pages costs far fewer TLB misses
  // than from 4 KiB file pages, which shows most when several processes share the cores. The token
  // embedding stays mapped: only a few of its rows are read per token. Matrices copied by an
  // earlier call stay where they are, so calls for several ranges add up. Must not run while
  // anything reads the weights. `progress(done, total)` is called every few hundred MiB and at
  // the end; returning false cancels (Status kCancelled) and leaves the weights as they were.
  // Q4_0, Q5_0, Q8_0 and Q4_K matrices (experts too, when an expert's rows come in groups of 16)
  // are copied into the interleaved layout of kernels/interleave.h when this CPU's kernels have it
  // (same bytes, faster products).
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
