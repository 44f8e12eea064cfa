// Flags shared by the commands that run a model (run, logits, bench), named as llama.cpp names
// them where it has them.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "engine/engine.h"
#include "sampling/sampler.h"

namespace tandem::apps {

struct ModelFlags {
  std::string model;
  int64_t n_ctx = 4096;
  int threads = 2;
  int64_t n_batch = 512;
};

inline void AddModelFlags(CLI::App* cmd, ModelFlags* f) {
  cmd->add_option("-m,--model", f->model, "GGUF model file")->required();
  cmd->add_option("-c,--ctx-size", f->n_ctx, "Context size in tokens (capped at the model's)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-t,--threads", f->threads, "Threads")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("-b,--batch-size", f->n_batch, "Prompt tokens per forward pass")
      ->capture_default_str()->check(CLI::PositiveNumber);
}

inline engine::EngineOptions ToEngineOptions(const ModelFlags& f) {
  return {f.model, f.n_ctx, f.threads, f.n_batch};
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
