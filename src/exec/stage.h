// Stage: a contiguous range of a model's layers with their KV cache and, on the last stage, the
// samplers of the sequences it serves. Every node of a pipeline runs exactly one Stage (the main
// node its first layers, each worker its range); a single node runs the whole model as one Stage.
// A pipeline is stages connected by links (pipeline/): the links move what one stage's Forward
// leaves in hidden() to the next stage's Forward, and the last stage's token back.
//
// What travels with a micro-batch (StageStep) is applied in a fixed order before computing it:
// drop every sequence, truncate sequences, (last stage) configure samplers of sequences. Because
// every stage applies the same step with the same micro-batch, caches stay consistent across the
// pipeline without any other message.
//
// The last stage samples one token for every row marked for logits, with the sampler of that
// row's sequence, in row order (a server's batch: one token per sequence; a prompt: its last row).
//
// Thread safety: none; one call at a time (the owner serialises).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "exec/sampler_set.h"
#include "model/forward.h"
#include "sampling/sampler.h"

namespace tandem::exec {

// Splits `b` into consecutive micro-batches of at most `ubatch` rows (positions, sequences and
// marks kept; tokens too when present) and calls fn(sub, begin, end) for each in order, stopping
// at the first error. With one micro-batch `sub` is a copy of `b`.
Status ForEachMicroBatch(const model::Batch& b, int64_t ubatch, model::Batch* sub,
                         const std::function<Status(const model::Batch&, int64_t, int64_t)>& fn);

// The micro-batch size for a prompt of `n_tokens` over `n_stages` stages when the user gives
// none. One node takes up to 512 tokens per pass (fewer passes over the weights). A pipeline
// cuts the prompt so that each stage has about 8 micro-batches: while stage 2 computes micro-batch
// i, stage 1 computes i+1, and 4 micro-batches cannot keep 2 stages busy (measured: two stages
// on two cores ran a 512-token prompt 1.55x one core with 128-token micro-batches, 1.8x with 32);
// never under 32 tokens, where per-message costs start to show. Always a multiple of 8, the
// multi-row kernels' group, so the choice changes no result: the logits are the same to the bit
// for any split into multiples of 8 (tested), so one node and a pipeline agree by default.
int64_t AutoMicroBatch(int64_t n_tokens, int n_stages);

// Drop the cells of `seq` at positions >= `from` (0: the whole sequence).
struct Truncation {
  int32_t seq = 0, from = 0;
};

// (Re)configure the sampler of `seq` with `params` and the sequence's tokens so far.
struct SequenceSampler {
  int32_t seq = 0;
  sampling::SamplerParams params;
  std::vector<int32_t> history;
};

struct StageStep {
  bool clear_all = false;                                // drop every sequence first
  const std::vector<Truncation>* truncate = nullptr;     // then these, in order
  const std::vector<SequenceSampler>* samplers = nullptr;  // then (last stage) these
};

class Stage {
 public:
  // Layers [layer_begin, layer_end) of `model` (layer_end -1: to the last layer), n_ctx cells of
  // KV cache of the given types, `threads` compute threads. `model` must outlive the stage.
  Stage(const model::Model& model, int64_t n_ctx, int threads, int64_t layer_begin, int64_t layer_end,
        const model::ContextOptions& options);

  // Applies `step` (see above): clear, truncate, configure samplers. An error (a sampler the
  // parameters do not make) leaves the cache changes applied.
  Status ApplyStep(const StageStep& step);

  // ApplyStep(step, batch), then computes `batch`: the first stage embeds batch.tokens (`hidden_in`
  // null), a later one takes the previous stage's output (batch.size() rows of n_embd floats).
  // Afterwards hidden() holds this stage's output, or (last stage) logits() the marked rows'.
  Status Forward(const model::Batch& batch, const float* hidden_in, const StageStep& step = {});

  // Last stage, after Forward: a token for every marked row of `batch` (in row order) from
  // logits() with the sampler of the row's sequence, each recorded in its sampler; appended to
  // `tokens`.
  // With `guesses` (one per marked row), verifies them as RunOptions::guesses says.
  Status Sample(const model::Batch& batch, std::vector<int32_t>* tokens,
                std::span<const int32_t> guesses = {});
  // The same from logits rows the caller gathered (a batch computed in several micro-batches):
  // `logits` holds one row of n_vocab per marked row of `batch`.
  Status SampleRows(const model::Batch& batch, const float* logits, std::vector<int32_t>* tokens,
                    std::span<const int32_t> guesses = {});

  // Drops every sequence from the cache and every sampler.
  void Clear();

  bool is_first() const { return ctx_.is_first(); }
  bool is_last() const { return ctx_.is_last(); }
  const float* hidden() const { return ctx_.hidden(); }
  const float* logits() const { return ctx_.logits(); }
  int64_t n_logits() const { return ctx_.n_logits(); }
  const model::ModelParams& params() const { return model_.params(); }
  model::Context& context() { return ctx_; }

 private:
  const model::Model& model_;
  model::Context ctx_;
  SamplerSet samplers_;
};

}  // namespace tandem::exec
