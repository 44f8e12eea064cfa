// Forward: runs a batch of tokens through a contiguous range of layers of a Model.
//
// A Batch lists tokens (or, for a pipeline stage after the first, their hidden states), each with
// its sequence id and position, and which of them need logits. The whole model is the layer
// range [0, n_layer) plus the embedding (first stage) and the output head (last stage); a
// pipeline stage runs a sub-range of the same code.
//
// Per layer: RMSNorm, Q/K/V projections (+ biases, + per-head Q/K norms), RoPE, K/V written to
// the cache, attention of each token over the cache cells of its sequence at positions <= its
// own (on a sliding-window layer only those within the window), output projection (+ its norm)
// and residual; RMSNorm, the feed-forward block (SiLU- or GELU-gated, or a mixture of experts;
// + its norm) and residual. model/params.h says which architecture has which.
//
// Mixture of experts: the router's softmax picks each token's top experts; the tokens are then
// grouped by expert, so each chosen expert's weights are read once per batch (a decode step reads
// only the chosen experts' rows), and its outputs are added to its tokens with their weights.
//
// Attention works on tiles: a few tokens of one sequence (consecutive by position) times all
// the query heads that share one KV head (GQA), so every K and V row read serves many queries.
// Once per batch the cells of each of its sequences are listed in position order; a token
// attends to a prefix of its sequence's list. Two algorithms, chosen by ContextOptions:
// standard computes each query row's scores over its whole prefix, softmaxes them and sums the
// V rows; flash (llama.cpp's -fa) goes over the prefix in blocks of cells with an online
// softmax (running max and sum, the accumulator rescaled when the max grows), so no score row is
// ever held whole. Both take F16, F32 or Q8_0 KV caches.
//
// Thread safety: one Forward call at a time per Context. Buffers are allocated for the largest
// batch seen and then reused: a decode step allocates nothing once warm.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "gpu/device.h"
#include "model/gpu_layers.h"
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

struct ContextOptions {
  bool flash_attn = false;  // flash attention (see above) instead of the standard algorithm
  quant::TensorType type_k = quant::TensorType::kF16;  // KV cache types: F16, F32 or Q8_0
  quant::TensorType type_v = quant::TensorType::kF16;
  // Sliding-window layers keep every cell, as global layers do (llama.cpp's --swa-full), instead
  // of only those their window still reaches (model/kv_cache.h).
  bool swa_full = false;
  // The last `gpu_layers` layers of the context's range (all, when it is larger; -1: as many as
  // fit in the device's memory), and on the last stage the output head, run on `device`
  // (model/gpu_layers.h); none without a device.
  std::shared_ptr<gpu::Device> device;
  int64_t gpu_layers = 0;
};

// How many of layers [begin, end) a Context with `options` runs on its GPU: options.gpu_layers
// clamped to the range; for -1 those that fit (none when the GPU path refuses the model).
int64_t GpuLayerCount(const Model& model, int64_t n_ctx, int64_t begin, int64_t end, const ContextOptions& options);

// Ok if a Context of `model` can use `options` (InvalidArgument saying why not otherwise).
Status CheckContextOptions(const ModelParams& params, const ContextOptions& options);

class Context {
 public:
  // `n_ctx` cells of KV cache for layers [layer_begin, layer_end). Options that
  // CheckContextOptions rejects fall back to an F16 cache.
  Context(const Model& model, int64_t n_ctx, int n_threads, int64_t layer_begin = 0,
          int64_t layer_end = -1, const ContextOptions& options = ContextOptions());
  Context(const Model& model, int64_t n_ctx, int n_threads, const ContextOptions& options)
      : Context(model, n_ctx, n_threads, 0, -1, options) {}

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

  // Ok, or why the GPU part could not be set up (out of device memory, a refused layer); then
  // every Forward returns it.
  const Status& status() const { return gpu_status_; }
  // Layers of the range on the GPU.
  int64_t gpu_layers() const { return layer_end_ - host_end_; }
  // Forward calls whose GPU part replayed the previous recording (GpuLayers::replays).
  uint64_t gpu_replays() const { return gpu_ != nullptr ? gpu_->replays() : 0; }

  const float* logits() const { return logits_.data(); }
  int64_t n_logits() const { return n_logits_; }
  const float* hidden() const { return x_.data(); }  // [batch.size(), n_embd] after Forward

  bool is_first() const { return layer_begin_ == 0; }
  bool is_last() const { return layer_end_ == p_.n_layer; }
  int64_t layer_begin() const { return layer_begin_; }
  int64_t layer_end() const { return layer_end_; }

  KvCache& cache() { return cache_; }
  // For tests: every Forward from now on appends, for each mixture-of-experts layer it runs and
  // each token of the batch, the n_expert_used experts chosen (most probable first) to `log` and,
  // if given, the router's margin to `margins`: log p of the last chosen expert minus log p of
  // the best one left out (how close the choice was to a tie; the CPU layers only). nullptr stops it.
  void set_expert_log(std::vector<int32_t>* log, std::vector<float>* margins = nullptr) {
    expert_log_ = log;
    margin_log_ = margins;
  }
  ThreadPool& pool() { return pool_; }
  const ContextOptions& options() const { return options_; }

 private:
  // Tokens tok_order_[begin, end) of plan sequence `seq`, ascending by position.
  struct Tile {
    int64_t seq, begin, end;
  };
  // The cells of each of the batch's sequences in one pool of the cache (model/kv_cache.h), and
  // which of them each token attends to.
  struct CellPlan {
    std::vector<int64_t> seq_begin;  // [plan_seqs_ + 1]: each sequence's cells in seq_cells
    std::vector<int64_t> seq_cells;  // cells of each plan sequence, by position
    std::vector<int32_t> seq_pos;    // their positions
    std::vector<int64_t> tok_len;    // per token: how many of its sequence's cells it attends to
    std::vector<int64_t> tok_start;  // per token: the first of them a sliding-window layer attends to
  };

  Status Embed(const Batch& batch);
  void Layer(int64_t il, const Batch& batch, const int64_t* cells);
  // The feed-forward block of layer `w` on xn_ (n normalised rows) into out (n rows).
  // out (nt rows, `stride` apart) = in (nt rows) times m's rows, in m's layout.
  void Mul(const Matrix& m, const float* in, int64_t nt, float* out, int64_t stride);
  // Mul of up to 3 matrices with the same input, each output `m.rows` apart. A decode step (nt 1)
  // runs them in one pass of the pool (kernels::MatVecBatch: one wake-up, the input quantized
  // once), with the bits separate calls give.
  struct Product {
    const Matrix* m;
    float* out;
  };
  void MulSameInput(std::initializer_list<Product> products, const float* in, int64_t nt);
  // The FFN of the batch's n tokens into out; or, where it can (a small batch) and `residual` is
  // given, added to residual instead: returns whether it did.
  bool FeedForward(const LayerWeights& w, int64_t n, float* out, float* residual);
  void MixtureOfExperts(const LayerWeights& w, int64_t n, float* out);
  void SharedExpert(const LayerWeights& w, int64_t n, float* out);
  void GeluMul(float* gate, const float* up, int64_t n);
  void PlanAttention(const Batch& batch);
  // Each token's RoPE cos and sin (rope_cs_, and rope_cs_local_ where layers slide), once per
  // batch for every layer (CPU and GPU).
  void RopeAngles(const Batch& batch);
  void PlanCells(const Batch& batch, KvCache::Pool pool);
  void Attention(int64_t il, const Batch& batch, int64_t n);
  void AttendTile(int th, int64_t layer, const Tile& tile, int64_t kvh, const CellPlan& plan, bool local);
  void Head(const Batch& batch);
  void Reserve(int64_t n);
  Status RunGpu(const Batch& batch);


  const Model& model_;
  const ModelParams& p_;
  const ContextOptions options_;
  const kernels::KernelTable& k_;
  int64_t layer_begin_, layer_end_;
  int64_t host_end_;  // layers [layer_begin_, host_end_) on the CPU, the rest on the GPU
  ThreadPool pool_;
  KvCache cache_;
  kernels::Scratch scratch_;
  std::vector<uint8_t> gated_act_;  // a small batch's gated FFN rows as the down matrix's activations
  std::vector<float> rope_inv_freq_;  // [head_dim / 2]
  std::vector<float> rope_inv_freq_local_;  // of the sliding-window layers (their own base)
  std::vector<float> rope_cs_;        // cos and sin at each token's position [n][head_dim]
  std::vector<float> rope_cs_local_;  // the same at the sliding-window layers' base (n_swa > 0)

  // Activations for up to `reserved_` tokens.
  int64_t reserved_ = 0;
  std::vector<float> x_, xn_, q_, k_buf_, v_buf_, att_, gate_, up_, tmp_, gelu_;
  std::vector<int64_t> cells_, window_cells_;  // per token: its cell in each pool
  // Mixture of experts: router outputs, each token's chosen experts and weights, the tokens of
  // one expert gathered, and its outputs.
  std::vector<float> router_, chosen_w_, xe_, ye_, shexp_out_;
  std::vector<int32_t> chosen_e_;
  std::vector<int64_t> expert_order_;  // a decode step's choices by expert id
  std::vector<int64_t> expert_rows_, expert_begin_, expert_next_;
  std::vector<int32_t>* expert_log_ = nullptr;
  std::vector<float>* margin_log_ = nullptr;
  std::vector<kernels::MatVecJob> expert_jobs_;

  // Attention plan of the batch (PlanAttention), shared by every layer.
  std::vector<int32_t> plan_seqs_;   // the batch's distinct sequences, ascending
  CellPlan cell_plans_[2];           // per pool of the cache
  std::vector<int64_t> tok_order_;   // batch tokens by (sequence, position)
  std::vector<Tile> tiles_;
  int64_t tile_tokens_ = 1;          // tokens per tile
  std::atomic<int64_t> next_job_{0};
  // Per thread: a tile's queries and outputs [tile rows][head_dim], scores, softmax max and
  // sum per row, and the K and V row pointers of the cells being read.
  int64_t tile_rows_ = 0, score_floats_ = 0, row_ptrs_ = 0;
  std::vector<float> att_q_, att_o_, att_s_, att_m_, att_l_;
  std::vector<const void*> att_kp_, att_vp_;
  std::vector<float> logits_;
  int64_t n_logits_ = 0;

  // The GPU layers, and their view of each batch (GpuBatch).
  std::unique_ptr<GpuLayers> gpu_;
  Status gpu_status_;
  std::vector<int32_t> gpu_cells_[2], gpu_seq_cells_[2], gpu_tok_[2], gpu_logit_rows_;
};

}  // namespace tandem::model
