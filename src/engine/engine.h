// Engine: one model with its tokenizer, KV cache and sampler, generating text for a prompt.
// The model runs through a exec::Executor: on this machine alone, or as a pipeline over workers
// (EngineOptions::cluster.workers); the generation loop is the same.
//
// Thread safety: none; one Generate at a time. The on_text callback runs on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "pipeline/coordinator.h"
#include "exec/executor.h"
#include "model/forward.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace tandem::engine {

struct EngineOptions {
  std::string model_path;
  int64_t n_ctx = 4096;  // clamped to the model's training context
  int n_threads = 2;
  int64_t n_batch = 512;  // prompt tokens per forward call
  model::ContextOptions context;  // flash attention, KV cache types
  // Compute from the file map (--mmap) instead of copying the weights into memory on huge pages
  // (the default: decode streams every weight per token, and 4 KiB file pages cost TLB misses).
  bool use_mmap = false;
  pipeline::ClusterOptions cluster;   // workers (none: this machine alone) and placement
};

struct GenerateOptions {
  int n_predict = -1;  // -1: until EOS or the context is full
  sampling::SamplerParams sampling;
  std::vector<std::string> stop;  // stop strings (not printed)
  bool parse_special = true;      // recognise special tokens written in the prompt
};

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prompt_seconds = 0, generate_seconds = 0;
  std::string stop_reason;  // "eos", "length", "stop string", "callback", "context"
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Open(const EngineOptions& options);

  // Generates a continuation of `prompt` (an empty prompt starts from BOS alone), calling
  // on_text with each piece of valid UTF-8 as it is produced; on_text returning false stops.
  Result<GenerateStats> Generate(std::string_view prompt, const GenerateOptions& options,
                                 const std::function<bool(std::string_view)>& on_text);

  // True for tokens that end a turn: EOS and the end-of-turn tokens of common chat formats.
  bool IsEndOfGeneration(int32_t id) const;

  const model::Model& model() const { return *model_; }
  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }
  exec::Executor& executor() { return *exec_; }

 private:
  Engine(std::unique_ptr<model::Model> m, tokenizer::Tokenizer t, const EngineOptions& o);

  std::unique_ptr<model::Model> model_;
  tokenizer::Tokenizer tokenizer_;
  std::unique_ptr<exec::Executor> exec_;
  EngineOptions options_;
  std::vector<int32_t> end_tokens_;
};

}  // namespace tandem::engine
