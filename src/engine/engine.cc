#include "engine/engine.h"


#include <cstdio>

#include <algorithm>
#include <chrono>
#include <random>

#include "engine/prefix.h"
#include "engine/stop_strings.h"
#include "tokenizer/stream_decoder.h"

namespace tandem::engine {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Engine::Engine(std::unique_ptr<model::Model> m, tokenizer::Tokenizer t, const EngineOptions& o)
    : model_(std::move(m)), tokenizer_(std::move(t)), options_(o) {
  const tokenizer::Vocab& v = tokenizer_.vocab();
  if (v.eos() != tokenizer::kNoToken) end_tokens_.push_back(v.eos());
  // End-of-turn tokens of the chat formats in tokenizer/chat_template.h.
  for (const char* text : {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>", "<|end|>",
                           "<|endoftext|>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"}) {
    const tokenizer::TokenId id = v.Find(text);
    if (id != tokenizer::kNoToken) end_tokens_.push_back(id);
  }
}

bool Engine::IsEndOfGeneration(int32_t id) const {
  return std::find(end_tokens_.begin(), end_tokens_.end(), id) != end_tokens_.end();
}

Result<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& options) {
  TANDEM_ASSIGN_OR_RETURN(model::Model m, model::Model::Load(options.model_path));
  Result<tokenizer::Tokenizer> t = tokenizer::Tokenizer::FromGguf(m.file());
  if (!t.ok()) return t.status().WithContext(options.model_path);
  auto mp = std::make_unique<model::Model>(std::move(m));
  std::unique_ptr<Engine> e(new Engine(std::move(mp), std::move(t).value(), options));
  TANDEM_ASSIGN_OR_RETURN(e->exec_, e->OpenExecutor());
  SpeculationOptions so = options.speculation;
  so.threads = options.exec.threads;
  so.n_ctx = e->exec_->n_ctx();
  TANDEM_ASSIGN_OR_RETURN(e->drafter_, OpenDrafter(so, e->tokenizer_.vocab(), options.model_path));
  e->speculator_ = std::make_unique<Speculator>(e->drafter_.get(), so);
  return e;
}

Result<std::unique_ptr<exec::Executor>> Engine::OpenExecutor() {
  pipeline::ExecutorOptions xo = options_.exec;
  xo.n_ctx = std::min(xo.n_ctx, model_->params().n_ctx_train);
  return pipeline::OpenExecutor(*model_, options_.model_path, xo);
}

Result<GenerateStats> Engine::Generate(std::string_view prompt, const GenerateOptions& o,
                                       const std::function<bool(std::string_view)>& on_text) {
  GenerateStats stats;
  // Check the sampling parameters here, before anything runs (the sampler itself runs on the
  // last stage).
  TANDEM_RETURN_IF_ERROR(sampling::Sampler::Create(o.sampling).status());
  sampling::SamplerParams sp = o.sampling;
  if (sp.seed == sampling::kRandomSeed) sp.seed = std::random_device{}() & 0x7fffffff;
  tokenizer::EncodeOptions eo;
  eo.parse_special = o.parse_special;
  TANDEM_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, tokenizer_.Encode(prompt, eo));
  if (tokens.empty()) {
    const int32_t bos = tokenizer_.vocab().bos();
    if (bos == tokenizer::kNoToken) return Status::InvalidArgument("empty prompt and no BOS token");
    tokens.push_back(bos);
  }
  exec::Executor& ex = *exec_;
  (void)ex.Rejoin();  // a pipeline that lost a worker uses it again if it is back
  const int64_t n_ctx = ex.n_ctx();
  if (static_cast<int64_t>(tokens.size()) >= n_ctx) {
    return Status::OutOfRange("the prompt has " + std::to_string(tokens.size()) +
                              " tokens but the context holds " + std::to_string(n_ctx) +
                              " (raise -c)");
  }
  if (o.ignore_eos) sp.banned = end_tokens_;

  // Reuse the cached prefix the prompt shares; at least the last prompt token is computed (its
  // logits give the first new token). Everything from the first difference on is dropped.
  if (!cache_valid_) {
    TANDEM_RETURN_IF_ERROR(ex.Clear());
    cached_.clear();
    cache_seen_ = 0;
    cache_valid_ = true;
  }
  const size_t reuse = ReusablePrefix(ex.params(), cached_, tokens, &cache_seen_);
  cached_.resize(reuse);

  // The rest of the prompt in one Run (the executor splits it into micro-batches); the first
  // token is sampled from the last position, with the whole prompt as the sampler's history.
  const auto t0 = std::chrono::steady_clock::now();
  model::Batch batch;
  for (size_t j = reuse; j < tokens.size(); ++j) {
    batch.Add(tokens[j], static_cast<int32_t>(j), 0, j + 1 == tokens.size());
  }
  exec::RunOptions ro;
  ro.sample = true;
  ro.samplers.push_back({0, sp, tokens});
  // Drop whatever follows the shared prefix (a no-op when nothing does).
  ro.truncate.push_back({0, static_cast<int32_t>(reuse)});
  exec::RunOutput out;
  cache_valid_ = false;  // until the run is known to have succeeded
  TANDEM_RETURN_IF_ERROR(ex.Run(batch, ro, &out));
  cache_valid_ = true;
  cached_ = tokens;
  stats.prompt_tokens = static_cast<int64_t>(tokens.size());
  stats.prompt_tokens_cached = static_cast<int64_t>(reuse);
  stats.prompt_tokens_computed = static_cast<int64_t>(tokens.size() - reuse);
  stats.prompt_seconds = Since(t0);

  // Generation: stream each sampled token's text, then feed the last one back (with guesses
  // after it when a drafter has some: each step may give several tokens).
  const auto t1 = std::chrono::steady_clock::now();
  tokenizer::DetokenizeStream stream(tokenizer_);
  StopStrings stops(o.stop);
  std::string text;
  const bool strip_first_space = tokens.size() == 1 && tokens[0] == tokenizer_.vocab().bos();
  stats.stop_reason = "length";
  speculator_->ResetStats();
  speculator_->set_banned(sp.banned);
  std::vector<int32_t> fresh = {out.token};
  int n = 0;
  for (bool done = false; !done;) {
    for (int32_t next : fresh) {
      if (o.n_predict >= 0 && n >= o.n_predict) {
        done = true;
        break;
      }
      if (!o.ignore_eos && IsEndOfGeneration(next)) {
        stats.stop_reason = "eos";
        done = true;
        break;
      }
      ++stats.generated_tokens;
      text.clear();
      stream.Push(next, &text);
      // After BOS alone, SentencePiece's first piece carries the space that marks a word start.
      if (strip_first_space && n == 0 && !text.empty() && text[0] == ' ') text.erase(0, 1);
      ++n;
      bool stopped = false;
      const std::string emit = stops.Push(text, &stopped);
      if (!emit.empty() && !on_text(emit)) {
        stats.stop_reason = "callback";
        done = true;
        break;
      }
      if (stopped) {
        stats.stop_reason = "stop string";
        done = true;
        break;
      }
    }
    if (done || (o.n_predict >= 0 && n >= o.n_predict)) break;
    if (static_cast<int64_t>(cached_.size()) + 1 >= n_ctx) {
      stats.stop_reason = "context";
      break;
    }
    const int max_new = o.n_predict < 0 ? 1 << 20 : o.n_predict - n;
    cache_valid_ = false;
    TANDEM_RETURN_IF_ERROR(speculator_->Step(ex, 0, &cached_, fresh.back(), max_new, &fresh, &out));
    cache_valid_ = true;
  }
  text.clear();
  stream.Finish(&text);
  if (stats.stop_reason != "stop string") {
    bool stopped = false;
    std::string rest = stops.Push(text, &stopped);
    if (!stopped) rest += stops.Flush();
    if (!rest.empty()) on_text(rest);
  }
  stats.generate_seconds = Since(t1);
  if (drafter_) {
    stats.drafter = drafter_->name();
    stats.speculation = speculator_->stats();
  }
  return stats;
}

}  // namespace tandem::engine
