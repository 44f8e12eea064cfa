// MakeModel: writes a random-weight GGUF model of a known shape. Weights are uniform in
// [-1/sqrt(fan_in), 1/sqrt(fan_in)] so every layer changes the hidden state; norms are 1.
// The same seed always gives the same file, and the same weights before rounding whatever the
// file type: a q4_K_M file holds the quantized weights of the f32 file with the same seed.
// Weight matrices are quantized row by row with the reference quantizers of src/quant, on
// several threads.
//
// Thread safety: reentrant; each call writes its own file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "gguf/format.h"
#include "gguf/writer.h"
#include "synth/model_shapes.h"

namespace tandem::synth {

// What a whole file is stored as, numbered as llama.cpp's general.file_type. The quantized ones
// follow llama.cpp's choice of tensor types (see TensorTypeFor); norms and biases stay F32.
enum class FileType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 7,
  kQ4_K_M = 15,
  kQ6_K = 18,
  kBF16 = 32,
};

// "f32", "f16", "bf16", "q8_0", "q4_0", "q6_K", "q4_K_M" (any case); nullopt if unknown.
std::optional<FileType> ParseFileType(std::string_view name);
std::string_view FileTypeName(FileType t);
std::string FileTypeNames();  // "f32, f16, ..." for help and errors

// The storage type of a weight matrix named `name` ("token_embd.weight", "output.weight",
// "blk.N.attn_v.weight", ...) in layer `layer` (ignored outside blocks) of a model with n_layer
// layers whose rows have row_len elements, as llama.cpp's quantizer chooses it:
//   - output.weight (and token_embd.weight when the output is tied to it): Q6_K in quantized
//     files other than Q8_0 (Q8_0 if rows are not a multiple of 256);
//   - Q4_K_M: attn_v and ffn_down are Q6_K in the layers where "use more bits" holds,
//     i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2; everything else Q4_K;
//   - a K type on rows that are not a multiple of 256 falls back as llama.cpp does:
//     Q4_K -> Q5_0, Q6_K -> Q8_0.
gguf::TensorType TensorTypeFor(FileType t, std::string_view name, uint32_t layer, uint32_t n_layer,
                               uint64_t row_len, bool tied_output);

struct MakeModelOptions {
  ModelShape shape;
  FileType type = FileType::kF32;
  uint64_t seed = 42;
};

// Builds the writer (metadata and lazily generated tensors) without writing anything.
Result<gguf::GgufWriter> BuildModel(const MakeModelOptions& options);

// Builds and writes the model to `path`, reporting progress per tensor.
Status MakeModel(const MakeModelOptions& options, const std::string& path,
                 const std::function<void(size_t done, size_t total)>& progress = {});

}  // namespace tandem::synth
