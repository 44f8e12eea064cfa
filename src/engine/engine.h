// Engine: one model with its tokenizer, KV cache and sampler, generating text for a prompt.
// The model runs through a exec::Executor: on this machine alone, or as a pipeline over workers
// (EngineOptions::exec.workers); the generation loop is the same.
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
#include "pipeline/executor_factory.h"
#include "engine/speculative.h"
#include "exec/executor.h"
#include "model/forward.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace tandem::engine {

struct EngineOptions {
  std::string model_path;
  // How the model runs: threads, context (clamped to the model's training context), micro-batch,
  // flash attention and KV cache types, --mmap, and the workers (none: this machine alone).
  pipeline::ExecutorOptions exec;
  // Speculative decoding (engine/speculative.h): --lookup or a draft model, on this machine.
  SpeculationOptions speculation;
};

struct GenerateOptions {
  int n_predict = -1;  // -1: until EOS or the context is full
  sampling::SamplerParams sampling;
  std::vector<std::string> stop;  // stop strings (not printed)
  bool parse_special = true;      // recognise special tokens written in the prompt
  bool ignore_eos = false;        // end-of-generation tokens are never sampled (--ignore-eos)
};

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  // Of the prompt's tokens, how many were already in the cache from the previous Generate (a
  // chat's earlier turns) and how many were computed now.
  int64_t prompt_tokens_cached = 0, prompt_tokens_computed = 0;
  double prompt_seconds = 0, generate_seconds = 0;
  std::string stop_reason;  // "eos", "length", "stop string", "callback", "context"
  // With a drafter: its name and this generation's rounds, guesses and acceptance.
  std::string drafter;
  SpeculationStats speculation;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Open(const EngineOptions& options);

  // Generates a continuation of `prompt` (an empty prompt starts from BOS alone), calling
  // on_text with each piece of valid UTF-8 as it is produced; on_text returning false stops.
  // The KV cache keeps what the previous Generate computed: when this prompt starts with the
  // same tokens (a chat re-sends its history plus a new turn), only the rest is computed, on one
  // node and over workers alike (the truncation travels with the first micro-batch).
  Result<GenerateStats> Generate(std::string_view prompt, const GenerateOptions& options,
                                 const std::function<bool(std::string_view)>& on_text);

  // True for tokens that end a turn: EOS and the end-of-turn tokens of common chat formats.
  bool IsEndOfGeneration(int32_t id) const;

  // For a server (engine/scheduler.h): hands the executor over (Generate must not be called
  // afterwards) and builds a new one like it, e.g. after a worker died and came back.
  std::unique_ptr<exec::Executor> TakeExecutor() { return std::move(exec_); }
  Result<std::unique_ptr<exec::Executor>> OpenExecutor();

  // The drafter --lookup or -md asked for (null: none), for a server's scheduler.
  Drafter* drafter() const { return drafter_.get(); }
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
  // The tokens of sequence 0 whose keys and values are in the cache, in position order; cleared
  // when a run fails (the cache is then in an unknown state and is dropped before the next).
  std::vector<int32_t> cached_;
  size_t cache_seen_ = 0;  // the most tokens cached_ has held since the cache was emptied (engine/prefix.h)
  bool cache_valid_ = true;
  std::unique_ptr<Drafter> drafter_;     // none without --lookup / -md
  std::unique_ptr<Speculator> speculator_;
};

}  // namespace tandem::engine
