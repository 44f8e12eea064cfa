// Flags shared by the commands that run a model (run, chat, logits, bench), named as llama.cpp
// names them where it has them.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/sys.h"
#include "engine/engine.h"
#include "sampling/sampler.h"

namespace tandem::apps {

struct ModelFlags {
  std::string model;
  int64_t n_ctx = 4096;
  int threads = sys::DefaultThreadCount();  // physical cores (performance cores on Apple Silicon)
  int64_t n_batch = 512;
  bool flash_attn = false;
  bool use_mmap = false;
  std::string cache_type_k = "f16", cache_type_v = "f16";
};

// llama.cpp's multi-letter short flags, which CLI11 cannot declare, become their long forms
// (main.cc calls this on the command line before parsing; nothing after "--" changes).
inline void RewriteShortFlags(std::vector<const char*>& args) {
  static constexpr const char* kFlags[][2] = {
      {"-fa", "--flash-attn"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}};
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

inline void AddModelFlags(CLI::App* cmd, ModelFlags* f) {
  cmd->add_option("-m,--model", f->model, "GGUF model file")->required();
  cmd->add_option("-c,--ctx-size", f->n_ctx, "Context size in tokens (capped at the model's)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-t,--threads", f->threads, "Threads")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("-b,--batch-size", f->n_batch, "Prompt tokens per forward pass")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--flash-attn", f->flash_attn,
                "Flash attention (-fa): tiled over the cache with an online softmax");
  cmd->add_flag("--mmap,!--no-mmap", f->use_mmap,
                "Compute from the file map (less memory, slower decode) instead of copying the weights "
                "into memory on huge pages (--no-mmap, the default)");
  cmd->add_option("--cache-type-k", f->cache_type_k, "KV cache type for keys (-ctk)")
      ->capture_default_str()->check(CLI::IsMember({"f16", "q8_0", "f32"}));
  cmd->add_option("--cache-type-v", f->cache_type_v, "KV cache type for values (-ctv)")
      ->capture_default_str()->check(CLI::IsMember({"f16", "q8_0", "f32"}));
}

inline model::ContextOptions ToContextOptions(const ModelFlags& f) {
  return {f.flash_attn, CacheType(f.cache_type_k), CacheType(f.cache_type_v)};
}

inline engine::EngineOptions ToEngineOptions(const ModelFlags& f) {
  return {f.model, f.n_ctx, f.threads, f.n_batch, ToContextOptions(f), f.use_mmap};
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
  cmd->add_option("-s,--seed", s->seed, "Random seed (default: random)");
}

}  // namespace tandem::apps
