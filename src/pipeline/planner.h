// Planner: which node holds which layers.
//
// The main node (node 0) holds the token embedding and the first layers; each worker a
// contiguous range after it; the last node also holds the output norm and head. Layers are
// split in proportion to each node's free memory (`--plan memory`, as llama.cpp splits by device
// memory), or to given proportions (--tensor-split), or as explicit ranges (--layers). A plan
// whose weights and KV cache do not fit a node's free memory is refused with the numbers.
//
// `--plan auto` (the default) also predicts the time of a decode step from what each node
// measured: a stage costs its weight bytes (read once per token) over the node's measured
// matrix-vector speed, plus half the round trip to the node for the hop into it (and for the
// last worker, the hop back). It finds the contiguous ranges, over the nodes in their order and
// leaving out any that do not pay, that minimise that time within each node's memory, and takes
// them when they beat the memory plan's prediction by more than 10%; otherwise the memory plan
// (the predictions are too coarse to act on smaller differences, and a balanced split keeps
// prompt pipelining effective). Every plan carries its predicted milliseconds per stage.
//
// Thread safety: pure functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/reader.h"
#include "model/params.h"
#include "quant/quant.h"

namespace tandem::pipeline {

// Bytes the model needs, from its tensor table.
struct ModelFootprint {
  std::vector<uint64_t> layer_bytes;  // weights of each layer
  uint64_t embd_bytes = 0;            // token embedding (first node)
  uint64_t head_bytes = 0;            // output norm and head (last node); the embedding if tied
  uint64_t shared_bytes = 0;          // small tensors every node holds (model::TensorPart::kShared)
  std::vector<uint64_t> kv_bytes;     // KV cache of each layer for the planned context and types
                                      // (a sliding-window layer holds only its window's cells)
};
// The parts as model/layout.h assigns them to stages; the KV cache of the given types.
ModelFootprint Footprint(const gguf::GgufFile& file, const model::ModelParams& p, int64_t n_ctx,
                         quant::TensorType type_k = quant::TensorType::kF16,
                         quant::TensorType type_v = quant::TensorType::kF16);

struct NodeInfo {
  std::string name;          // "main" or "HOST:PORT"
  uint64_t free_memory = 0;  // bytes available for weights and KV cache (host memory)
  double matvec_gbps = 0;    // measured decode speed, GB/s of weights (0: unknown)
  double rtt_ms = 0;         // round trip from the main node (0 for the main node)
  // The GPU its stage runs on (gpu/device.h): its memory adds to the node's (the stage's last
  // layers go there, as many as fit), and the bytes there are read at its measured speed.
  uint64_t gpu_memory = 0;
  double gpu_gbps = 0;       // measured read bandwidth (0: unknown; then the CPU's speed counts)
};

enum class PlanMode { kAuto, kMemory };

struct PlanOptions {
  // Without --tensor-split or --layers. The commands default to kAuto (--plan); code that builds
  // options itself gets the memory plan unless it asks.
  PlanMode mode = PlanMode::kMemory;
  std::vector<double> tensor_split;  // one proportion per node (empty: by free memory)
  // Explicit ranges "0-7,8-15,16-21" (inclusive), one per node (empty: computed).
  std::string layers;
};

struct PlannedStage {
  int node = 0;
  int64_t layer_begin = 0, layer_end = 0;  // [begin, end)
  uint64_t weight_bytes = 0, kv_bytes = 0;
  // Predicted milliseconds per decode step: computing the stage, and the hop into it (for the
  // last stage of several, also the hop back to the main node). 0 when a speed is unknown.
  double compute_ms = 0, link_ms = 0;
};

struct Plan {
  std::vector<PlannedStage> stages;  // in pipeline order; a node left out by `auto` has none
  std::string how;                   // "memory", "speed", "tensor split", "layers"
  double predicted_ms() const;       // per decode step, the sum over stages (0: unknown)
  std::string ToString(const std::vector<NodeInfo>& nodes) const;  // a table for the user
};

// Fills the stages' predicted times from the nodes' speeds and round trips.
void Predict(const ModelFootprint& m, const std::vector<NodeInfo>& nodes, Plan* plan);

// Every node gets at least one layer, except those `auto` leaves out. InvalidArgument for malformed options; ResourceExhausted
// naming the node and the bytes when a stage does not fit.
Result<Plan> MakePlan(const ModelFootprint& m, const std::vector<NodeInfo>& nodes,
                      const PlanOptions& o);

// "0.5,0.25,0.25" -> proportions; "0-7,8-21" checked later by MakePlan.
Result<std::vector<double>> ParseTensorSplit(const std::string& s);

}  // namespace tandem::pipeline
