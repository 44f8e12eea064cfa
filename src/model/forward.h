// Forward: runs a batch of tokens through a contiguous range of layers of a Model.
//
// A Batch lists tokens (or, for a pipeline stage after the first, their hidden states), each with
// its sequence id and position, and which of them need logits. The whole model is the layer
// range [0, n_layer) plus the embedding (first stage) and the output head (last stage); a
// pipeline stage runs a sub-range of the same code.
//
// Per layer: RMSNorm, Q/K/V projections (+ biases, + per-head Q/K norms), RoPE, K/V written to
// the cache, attention of each token over the cache cells of its sequence at positions <= its
// own, output projection and residual; RMSNorm, SwiGLU feed-forward and residual.
//
// Thread safety: one Forward call at a time per Context. Buffers are allocated for the largest
// batch seen and then reused: a decode step allocates nothing once warm.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace tandem::model {

struct Batch {
  std::vector<int32_t> tokens;  // first stage: token ids (else empty, see hidden)
  std::vector<int32_t> pos;     // position of each token in its sequence
  std::vector<int32_t> seq;     // sequence id of each token
  std::vector<uint8_t> logits;  // 1 where the caller wants logits for that token

  int64_t size() const { return static_cast<int64_t>(pos.size()); }
  void Clear() { tokens.clear(); pos.clear(); seq.clear(); logits.clear(); }
  void Add(int32_t token, int32_t position, int32_t sequence, bool want_logits) {
    tokens.push_back(token);
    pos.push_back(position);
    seq.push_back(sequence);
    logits.push_back(want_logits ? 1 : 0);
  }
};

class Context {
 public:
  // `n_ctx` cells of KV cache for layers [layer_begin, layer_end).
  Context(const Model& model, int64_t n_ctx, int n_threads, int64_t layer_begin = 0,
          int64_t layer_end = -1);

  // The whole model (the range must be [0, n_layer)): embeds, runs every layer and the head.
  // Logits of the tokens marked in the batch, one row of n_vocab each, in batch order, are in
  // logits() afterwards.
  Status Decode(const Batch& batch) { return Forward(batch, nullptr); }

  // One pipeline stage. The first stage (layer_begin 0) embeds batch.tokens when `hidden_in` is
  // null; a later stage takes the hidden states of the previous one, `hidden_in` holding
  // batch.size() rows of n_embd floats. The last stage (layer_end n_layer) runs the head and
  // fills logits(); any other stage leaves the output hidden states in hidden().
  // On error no cache cell stays claimed.
  Status Forward(const Batch& batch, const float* hidden_in);

  const float* logits() const { return logits_.data(); }
  int64_t n_logits() const { return n_logits_; }
  const float* hidden() const { return x_.data(); }  // [batch.size(), n_embd] after Forward

  bool is_first() const { return layer_begin_ == 0; }
  bool is_last() const { return layer_end_ == p_.n_layer; }
  int64_t layer_begin() const { return layer_begin_; }
  int64_t layer_end() const { return layer_end_; }

  KvCache& cache() { return cache_; }
  ThreadPool& pool() { return pool_; }

 private:
  Status Embed(const Batch& batch);
  void Layer(int64_t il, const Batch& batch, const int64_t* cells);
  void Attention(int64_t il, const Batch& batch, int64_t n);
  void Head(const Batch& batch);
  void Reserve(int64_t n);

  const Model& model_;
  const ModelParams& p_;
  const kernels::KernelTable& k_;
  int64_t layer_begin_, layer_end_;
  ThreadPool pool_;
  KvCache cache_;
  kernels::Scratch scratch_;
  std::vector<float> rope_inv_freq_;  // [head_dim / 2]
  std::vector<float> rope_cs_;        // cos and sin of one position [head_dim]

  // Activations for up to `reserved_` tokens.
  int64_t reserved_ = 0;
  std::vector<float> x_, xn_, q_, k_buf_, v_buf_, att_, gate_, up_, tmp_;
  std::vector<float> scores_;  // per thread: [n_ctx]
  std::vector<float> vacc_;    // per thread: [head_dim]
  std::vector<int64_t> cells_;
  std::vector<float> logits_;
  int64_t n_logits_ = 0;
};

}  // namespace tandem::model
