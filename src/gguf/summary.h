// ModelSummary: the figures a person or a layer planner wants from a GGUF file: architecture
// hyperparameters, bytes by tensor type, and bytes per transformer layer.
//
// Summarize() never fails: hyperparameters that are absent or of the wrong type are left empty.
// Thread safety: pure function of an immutable GgufFile.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gguf/format.h"
#include "gguf/reader.h"

namespace tandem::gguf {

struct TypeTotal {
  TensorType type;
  uint64_t tensors = 0;
  uint64_t bytes = 0;
};

struct ModelSummary {
  std::string architecture;  // general.architecture, or empty
  std::string name;          // general.name, or empty
  std::optional<uint64_t> n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_ctx, n_vocab;
  std::optional<double> rope_freq_base;
  std::optional<double> rms_eps;

  uint64_t n_params = 0;
  uint64_t tensor_bytes = 0;
  std::vector<TypeTotal> by_type;           // sorted by type id
  std::map<uint64_t, uint64_t> layer_bytes;  // layer index ("blk.N.") -> bytes
  uint64_t non_layer_bytes = 0;
  std::vector<std::string> non_layer_tensors;
};

ModelSummary Summarize(const GgufFile& file);

// If `name` is "blk.N.<rest>", returns N.
std::optional<uint64_t> LayerOfTensor(std::string_view name);

}  // namespace tandem::gguf
