// Flags shared by the commands that run a model (run, chat, logits, bench), named as llama.cpp
// names them where it has them.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "base/sys.h"
#include "engine/engine.h"
#include "gpu/device.h"
#include "sampling/sampler.h"

namespace tandem::apps {

struct ModelFlags {
  std::string model;
  int64_t n_ctx = 4096;
  int threads = sys::DefaultThreadCount();  // physical cores (performance cores on Apple Silicon)
  int64_t ubatch = 0;   // -ub: prompt tokens per micro-batch (0: chosen per prompt)
  int64_t n_batch = 0;  // -b: llama.cpp's batch; here it caps the micro-batch (0: no cap)
  bool flash_attn = false;
  bool use_mmap = false;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  std::string device;         // --device: CPU, Vulkan0, ... ("": the first GPU, else the CPU)
  int64_t n_gpu_layers = -1;  // -ngl: layers on the GPU (-1: as many as fit)
  engine::SpeculationOptions speculation;  // AddSpeculationFlags (run, chat, bench, serve)
};

// llama.cpp's multi-letter short flags, which CLI11 cannot declare, become their long forms
// (main.cc calls this on the command line before parsing; nothing after "--" changes).
inline void RewriteShortFlags(std::vector<const char*>& args) {
  static constexpr const char* kFlags[][2] = {
      {"-fa", "--flash-attn"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"},
      {"-ub", "--ubatch-size"}, {"-ts", "--tensor-split"}, {"-np", "--parallel"},
      {"-md", "--model-draft"}, {"-ngl", "--n-gpu-layers"}, {"-dev", "--device"}};
  for (size_t i = 1; i < args.size(); ++i) {
    if (std::string_view(args[i]) == "--") break;
    for (const auto& f : kFlags) {
      if (std::string_view(args[i]) == f[0]) args[i] = f[1];
    }
  }
}

// The KV cache type named by a --cache-type-k/v value (f16, q8_0 or f32).
inline quant::TensorType CacheType(const std::string& name) {
  if (name == "f32") return quant::TensorType::kF32;
  if (name == "q8_0") return quant::TensorType::kQ8_0;
  return quant::TensorType::kF16;
}

inline void AddDeviceFlags(CLI::App* cmd, std::string* device, int64_t* n_gpu_layers);

inline void AddModelFlags(CLI::App* cmd, ModelFlags* f) {
  cmd->add_option("-m,--model", f->model, "GGUF model file")->required();
  cmd->add_option("-c,--ctx-size", f->n_ctx, "Context size in tokens (capped at the model's)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-t,--threads", f->threads, "Threads")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--ubatch-size,--ub", f->ubatch,
                  "Prompt tokens per micro-batch (-ub), on one node and over workers alike (default: "
                  "chosen from the prompt length and the number of stages)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("-b,--batch-size", f->n_batch,
                  "llama.cpp's batch size: the most prompt tokens per forward pass (caps -ub)")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--flash-attn", f->flash_attn,
                "Flash attention (-fa): tiled over the cache with an online softmax");
  cmd->add_flag("--mmap,!--no-mmap", f->use_mmap,
                "Compute from the file map (less memory, slower decode) instead of copying the weights "
                "into memory on huge pages (--no-mmap, the default)");
  cmd->add_option("--cache-type-k", f->cache_type_k, "KV cache type for keys (-ctk)")
      ->capture_default_str()->check(CLI::IsMember({"f16", "q8_0", "f32"}));
  cmd->add_option("--cache-type-v", f->cache_type_v, "KV cache type for values (-ctv)")
      ->capture_default_str()->check(CLI::IsMember({"f16", "q8_0", "f32"}));
  AddDeviceFlags(cmd, &f->device, &f->n_gpu_layers);
}

// --device and -ngl, on the commands that run a model and on `tandem worker`.
inline void AddDeviceFlags(CLI::App* cmd, std::string* device, int64_t* n_gpu_layers) {
  cmd->add_option("--device", *device,
                  "Device to compute on (-dev): CPU, Vulkan0, Vulkan1, ... (default: the first GPU, else the CPU; "
                  "--list-devices shows them)");
  cmd->add_option("--n-gpu-layers,--gpu-layers", *n_gpu_layers,
                  "Layers on the GPU (-ngl), the last ones of this node's range, with the head on the last "
                  "stage (default: as many as fit)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 20));
}

// Prints the Vulkan devices (--list-devices, before any subcommand's parsing): llama.cpp's format.
inline int ListDevices() {
  Result<std::vector<gpu::DeviceInfo>> list = gpu::ListDevices();
  std::printf("Available devices:\n  CPU: this machine's cores (always)\n");
  if (!list.ok()) {
    std::printf("  (no Vulkan devices: %s)\n", list.status().message().c_str());
    return 0;
  }
  for (const gpu::DeviceInfo& d : *list) {
    std::printf("  %s: %s (%llu MiB%s%s)\n", d.name.c_str(), d.description.c_str(),
                static_cast<unsigned long long>(d.memory_bytes >> 20), d.software ? ", software driver: only when named" : "",
                d.unusable.empty() ? "" : (", unusable: " + d.unusable).c_str());
  }
  return 0;
}

// The device --device names (see gpu::ChooseDevice), saying in one line on stderr when the
// default finds no GPU and the CPU runs.
inline Result<std::shared_ptr<gpu::Device>> OpenDevice(const std::string& name) {
  TANDEM_ASSIGN_OR_RETURN(gpu::DeviceChoice c, gpu::ChooseDevice(name));
  if (!c.note.empty()) std::fprintf(stderr, "tandem: %s\n", c.note.c_str());
  return c.device;
}

inline Result<model::ContextOptions> ToContextOptions(const ModelFlags& f) {
  model::ContextOptions o{f.flash_attn, CacheType(f.cache_type_k), CacheType(f.cache_type_v)};
  TANDEM_ASSIGN_OR_RETURN(o.device, OpenDevice(f.device));
  o.gpu_layers = f.n_gpu_layers;
  return o;
}

// The micro-batch the flags ask for: -ub, capped by -b; -b alone sets it (as in llama.cpp, where
// the micro-batch defaults to the batch when that is smaller); 0 when neither is given.
inline int64_t MicroBatch(const ModelFlags& f) {
  if (f.ubatch > 0) return f.n_batch > 0 ? std::min(f.ubatch, f.n_batch) : f.ubatch;
  return f.n_batch;
}

// Speculative decoding (engine/speculative.h), with llama.cpp's names.
inline void AddSpeculationFlags(CLI::App* cmd, engine::SpeculationOptions* s) {
  cmd->add_flag("--lookup", s->lookup,
                "Speculate by prompt lookup: guess that the text goes on as it did after the latest earlier "
                "occurrence of its last few tokens, and verify the guesses in one forward");
  cmd->add_option("--model-draft", s->draft_model,
                  "Speculate with this draft model (-md; same vocabulary, run on this machine)");
  cmd->add_option("--draft-max,--draft", s->draft_max, "Most guessed tokens per round")
      ->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--draft-min", s->draft_min, "Fewest guessed tokens worth a round (fewer: a plain step); equal to --draft-max: that many every round")
      ->capture_default_str()->check(CLI::Range(0, 64));
}

inline void AddSamplingFlags(CLI::App* cmd, sampling::SamplerParams* s) {
  cmd->add_option("--temp", s->temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", s->top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", s->top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", s->min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", s->repeat_last_n, "Penalty window in tokens")
      ->capture_default_str();
  cmd->add_option("--repeat-penalty", s->repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", s->frequency_penalty, "Frequency penalty")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", s->presence_penalty, "Presence penalty")
      ->capture_default_str();
  cmd->add_option_function<int64_t>(
         "-s,--seed",
         [s](int64_t v) { s->seed = v < 0 ? sampling::kRandomSeed : static_cast<uint64_t>(v); },
         "Random seed (-1 or unset: random)")
      ->check(CLI::Range(int64_t{-1}, int64_t{0xFFFFFFFE}));
}

}  // namespace tandem::apps
