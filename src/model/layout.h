// Layout: which tensors of a model file a stage of layers holds, and what a KV cache costs. The
// one place these are decided: the planner, the worker (before loading), the weight cache and
// the main node's weight streaming all ask here.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "gguf/reader.h"
#include "model/params.h"
#include "quant/quant.h"

namespace tandem::model {

// What a tensor is for, by its GGUF name.
enum class TensorPart {
  kLayer,      // "blk.N.*": belongs to layer N
  kEmbedding,  // token_embd.weight: the first stage (and the last too when the head is tied)
  kHead,       // output.weight, output_norm.weight: the last stage
  kShared,     // anything else (rope_freqs and the like): small, every stage may need it
};
// The part of a tensor and, for kLayer, its layer (else -1).
TensorPart PartOf(std::string_view name, int64_t* layer);

// True when the file has no output.weight: the head reuses the token embedding.
bool HeadIsTied(const gguf::GgufFile& file);

struct StageTensors {
  std::vector<const gguf::TensorInfo*> tensors;  // in the file's tensor order
  uint64_t bytes = 0;
};
// The tensors of a stage holding layers [layer_begin, layer_end): those layers' tensors; with
// `first` the embedding; with `last` the output norm and head (the embedding when tied); the
// shared small tensors always.
StageTensors TensorsOfStage(const gguf::GgufFile& file, int64_t layer_begin, int64_t layer_end,
                            bool first, bool last);

// Bytes of the KV cache of layers [layer_begin, layer_end) for a context of `n_ctx` cells with
// keys of `type_k` and values of `type_v` (F16, F32 or Q8_0): exactly what a Context's KvCache
// allocates at the start. A sliding-window layer holds WindowCells(p, n_ctx) cells (its pool can
// grow when several sequences need more, model/kv_cache.h).
uint64_t KvCacheBytes(const ModelParams& p, int64_t n_ctx, int64_t layer_begin, int64_t layer_end,
                      quant::TensorType type_k, quant::TensorType type_v);

}  // namespace tandem::model
