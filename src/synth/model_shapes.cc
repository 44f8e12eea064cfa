#include "synth/model_shapes.h"

namespace tandem::synth {

const std::vector<ModelShape>& KnownShapes() {
  // Published hyperparameters of each family; "tiny" is the shape of ../shared/reference tiny-*.
  static const std::vector<ModelShape> kShapes = {
      {"tiny", "llama", 4, 256, 768, 8, 4, 32, 512, 512, 10000.0f, 1e-5f, false},
      {"tinyllama-1.1b", "llama", 22, 2048, 5632, 32, 4, 64, 32000, 2048, 10000.0f, 1e-5f, false},
      {"qwen2.5-0.5b", "qwen2", 24, 896, 4864, 14, 2, 64, 151936, 32768, 1e6f, 1e-6f, true},
      {"qwen2.5-1.5b", "qwen2", 28, 1536, 8960, 12, 2, 128, 151936, 32768, 1e6f, 1e-6f, true},
      {"llama-3.2-3b", "llama", 28, 3072, 8192, 24, 8, 128, 128256, 131072, 500000.0f, 1e-5f, true},
      {"llama-3-8b", "llama", 32, 4096, 14336, 32, 8, 128, 128256, 8192, 500000.0f, 1e-5f, false},
      {"dense-27b", "llama", 62, 5376, 21504, 32, 16, 128, 262144, 131072, 1e6f, 1e-6f, false},
      {"dense-70b", "llama", 80, 8192, 28672, 64, 8, 128, 128256, 8192, 500000.0f, 1e-5f, false},
      {"gemma-3-1b", "gemma3", 26, 1152, 6912, 4, 1, 256, 262144, 32768, 1e6f, 1e-6f, true, 512},
      {"gemma-3-27b", "gemma3", 62, 5376, 21504, 32, 16, 128, 262144, 131072, 1e6f, 1e-6f, true, 1024},
      {"mixtral-8x7b", "llama", 32, 4096, 14336, 32, 8, 128, 32000, 32768, 1e6f, 1e-5f, false, 0, 8, 2, 14336},
      {"qwen3-30b-a3b", "qwen3moe", 48, 2048, 6144, 32, 4, 128, 151936, 40960, 1e6f, 1e-6f, false, 0, 128, 8, 768},
      {"qwen1.5-moe-a2.7b", "qwen2moe", 24, 2048, 5632, 16, 16, 128, 151936, 8192, 1e6f, 1e-6f, false, 0, 60, 4, 1408,
       5632},
  };
  return kShapes;
}

std::optional<ModelShape> FindShape(std::string_view name) {
  for (const ModelShape& s : KnownShapes()) {
    if (s.name == name) return s;
  }
  return std::nullopt;
}

std::string ShapeNames() {
  std::string out;
  for (const ModelShape& s : KnownShapes()) {
    if (!out.empty()) out += ", ";
    out += s.name;
  }
  return out;
}

}  // namespace tandem::synth
