// GpuLayers: the last layers of a Context's range, and the output head on the last stage, run on
// a Vulkan device (gpu/device.h), llama.cpp's -ngl offload.
//
// At creation the weights of those layers are uploaded once into device-local memory (a matrix
// larger than one binding can span is split by rows) and their KV cache is allocated there; the
// host keeps no copy of those cache rows (model/kv_cache.h's host_layers). Per batch the Context
// places the tokens' cells and plans attention as for its CPU layers (the same cells, so a
// truncation or a dropped window cell means the same thing on both), and GpuLayers records the
// layers' dispatches into one command buffer: the stage's input rows (hidden states) go up, and
// only its output (hidden states, or the logits of the marked tokens) comes back. A batch of the
// same shape as the last (a decode step after a decode step) replays that recording: the
// dispatches depend only on the number of tokens and logit rows, and everything that changes per
// step (hidden states, RoPE angles, cells, the attention plan) is read from buffers written
// before the submission.
//
// The forward steps are those of model/forward.h: RMSNorm, Q/K/V products (+ biases, per-head
// norms), RoPE (angles computed on the host, as the CPU path computes them), K and V stored in
// the cache (F16 or Q8_0), attention over the cells of each token's sequence (flash style, with
// its online softmax, whichever algorithm ContextOptions names), output product (+ its norm),
// residual; RMSNorm, SiLU- or GELU-gated FFN or the mixture of experts (the router, each token's
// top experts chosen on the device by model/moe.h's rule, each (token, choice) pair multiplied
// with its own expert's rows, the weighted sum; qwen2moe's shared expert added with its sigmoid
// gate) (+ its norm), residual.
//
// Thread safety: one Forward at a time (the Context's rule).
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "gpu/device.h"
#include "model/layout.h"
#include "model/model.h"

namespace tandem::model {

// Why layers [begin, end) of `params` cannot run on a GPU (empty: they can).
std::string GpuRefusal(const ModelParams& params, quant::TensorType type_k, quant::TensorType type_v);

// How many of layers [begin, end), counted back from `end`, fit in `device_bytes` of GPU memory
// with their KV cache for `n_ctx` cells (and the output head first, when `head`), leaving a tenth
// of the memory and the activations of a 512-token batch free; none when one layer's K or V
// cache would be larger than one binding (`max_binding` bytes). llama.cpp's -ngl default.
int64_t GpuLayersThatFit(const Model& model, int64_t n_ctx, int64_t begin, int64_t end, bool head,
                         quant::TensorType type_k, quant::TensorType type_v, uint64_t device_bytes,
                         uint64_t max_binding);

// A batch as the GPU layers see it, built by the Context from its attention plan.
struct GpuBatch {
  int64_t n = 0;  // tokens
  const int32_t* cells[2] = {nullptr, nullptr};  // per token: its cell in the full and window pools
  // Per pool (model/kv_cache.h): the cells of the batch's sequences by position, and per token
  // three ints: where its sequence's cells start there, the first it attends to on a
  // sliding-window layer, and how many it attends to (positions <= its own).
  const std::vector<int32_t>* seq_cells[2] = {nullptr, nullptr};
  const std::vector<int32_t>* tok[2] = {nullptr, nullptr};
  const float* rope_cs = nullptr;        // [n][head_dim]: cos then sin of each token's angles
  const float* rope_cs_local = nullptr;  // the same with the sliding-window layers' base
  const int32_t* logit_rows = nullptr;   // the tokens whose logits are wanted (last stage)
  int64_t n_logits = 0;
};

class GpuLayers {
 public:
  struct Config {
    int64_t layer_begin = 0, layer_end = 0;  // model layers on the GPU
    bool head = false;                       // and the output norm and head
    int64_t cache_layer0 = 0;                // the KV cache's layer index of layer_begin
    quant::TensorType type_k = quant::TensorType::kF16, type_v = quant::TensorType::kF16;
    int64_t cells[2] = {0, 0};               // cells per layer of the full and window pools
    std::vector<bool> window;                // per GPU layer: its cells are in the window pool
  };
  // Uploads the weights and allocates the cache. Errors name the device and what did not fit.
  // REQUIRES: GpuRefusal(...) is empty; the matrices are in the file's layout (not interleaved).
  static Result<std::unique_ptr<GpuLayers>> Create(std::shared_ptr<gpu::Device> device, const Model& model,
                                                   const Config& config);
  ~GpuLayers();

  // Runs the batch: `x` holds its n rows of n_embd input hidden states and receives the output
  // ones; with the head, `logits` receives n_logits rows of n_vocab instead. With `expert_log`,
  // each mixture-of-experts layer's choices (per token, n_expert_used ids, most probable first)
  // are appended to it, layer by layer, as Context::set_expert_log describes.
  Status Forward(const GpuBatch& batch, float* x, float* logits, std::vector<int32_t>* expert_log = nullptr);
  // The window pool grew to `cells` per layer (model/kv_cache.h): its rows are kept.
  Status GrowWindow(int64_t cells);

  // Bytes of device memory allocated on the device (by everything sharing it).
  uint64_t device_bytes() const;
  // Forward calls that replayed the previous recording instead of recording anew (a decode step
  // after a decode step does).
  uint64_t replays() const;

 private:
  struct Impl;
  explicit GpuLayers(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::model
