// MakeModel: writes a random-weight GGUF model of a known shape. Weights are uniform in
// [-1/sqrt(fan_in), 1/sqrt(fan_in)] so every layer changes the hidden state; norms are 1.
// The same seed always gives the same file.
//
// Thread safety: reentrant; each call writes its own file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "gguf/format.h"
#include "gguf/writer.h"
#include "synth/model_shapes.h"

namespace tandem::synth {

struct MakeModelOptions {
  ModelShape shape;
  gguf::TensorType type = gguf::TensorType::kF32;
  uint64_t seed = 42;
};

// Builds the writer (metadata and lazily generated tensors) without writing anything.
Result<gguf::GgufWriter> BuildModel(const MakeModelOptions& options);

// Builds and writes the model to `path`, reporting progress per tensor.
Status MakeModel(const MakeModelOptions& options, const std::string& path,
                 const std::function<void(size_t done, size_t total)>& progress = {});

}  // namespace tandem::synth
