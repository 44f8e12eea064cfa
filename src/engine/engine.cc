#include "engine/engine.h"

#include <cstdio>

#include <algorithm>
#include <chrono>
#include <random>

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
  TANDEM_RETURN_IF_ERROR(model::CheckContextOptions(m.params(), options.context));
  Result<tokenizer::Tokenizer> t = tokenizer::Tokenizer::FromGguf(m.file());
  if (!t.ok()) return t.status().WithContext(options.model_path);
  auto mp = std::make_unique<model::Model>(std::move(m));
  std::unique_ptr<Engine> e(new Engine(std::move(mp), std::move(t).value(), options));
  const int64_t n_ctx = std::min(options.n_ctx, e->model_->params().n_ctx_train);
  if (options.cluster.workers.empty()) {
    if (!options.use_mmap) {
      // Progress on stderr (or the cluster log) when the copy is big enough to take a while.
      auto say = [&](const std::string& line) {
        if (options.cluster.log) {
          options.cluster.log(line);
        } else {
          std::fprintf(stderr, "tandem: %s\n", line.c_str());
        }
      };
      const auto t0 = std::chrono::steady_clock::now();
      auto last = t0;
      TANDEM_RETURN_IF_ERROR(e->model_->CopyIntoMemory(
          0, e->model_->params().n_layer, true, [&](uint64_t done, uint64_t total) {
            const auto now = std::chrono::steady_clock::now();
            if (total >= (uint64_t{1} << 30) && (done == total || now - last > std::chrono::seconds(2))) {
              last = now;
              char line[160];
              std::snprintf(line, sizeof line, "weights copied into memory: %llu / %llu MiB (%.1f s)",
                            static_cast<unsigned long long>(done >> 20),
                            static_cast<unsigned long long>(total >> 20),
                            std::chrono::duration<double>(now - t0).count());
              say(line);
            }
            return true;
          }));
    }
    e->exec_ = std::make_unique<exec::LocalExecutor>(*e->model_, n_ctx, options.n_threads,
                                                     options.n_batch, options.context);
  } else {
    pipeline::ClusterOptions c = options.cluster;
    c.n_ctx = n_ctx;
    c.threads = options.n_threads;
    c.context = options.context;
    c.use_mmap = options.use_mmap;
    Result<std::unique_ptr<pipeline::Coordinator>> co = pipeline::Coordinator::Open(*e->model_, options.model_path, c);
    if (!co.ok()) return co.status();
    e->exec_ = std::move(*co);
  }
  return e;
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
  TANDEM_RETURN_IF_ERROR(ex.Clear());
  const int64_t n_ctx = ex.n_ctx();
  if (static_cast<int64_t>(tokens.size()) >= n_ctx) {
    return Status::OutOfRange("the prompt has " + std::to_string(tokens.size()) +
                              " tokens but the context holds " + std::to_string(n_ctx) +
                              " (raise -c)");
  }

  // Prompt in one Run (the executor splits it into micro-batches); the first token is sampled
  // from the last position, with the prompt as the sampler's history.
  const auto t0 = std::chrono::steady_clock::now();
  model::Batch batch;
  for (size_t j = 0; j < tokens.size(); ++j) {
    batch.Add(tokens[j], static_cast<int32_t>(j), 0, j + 1 == tokens.size());
  }
  exec::RunOptions ro;
  ro.sample = true;
  ro.sampler = sp;
  ro.history = tokens;
  exec::RunOutput out;
  TANDEM_RETURN_IF_ERROR(ex.Run(batch, ro, &out));
  stats.prompt_tokens = static_cast<int64_t>(tokens.size());
  stats.prompt_seconds = Since(t0);
  exec::RunOptions step;
  step.sample = true;

  // Generation: sample, stream the text, feed the token back.
  const auto t1 = std::chrono::steady_clock::now();
  tokenizer::DetokenizeStream stream(tokenizer_);
  std::string text, pending;  // pending: text held back while it could start a stop string
  int32_t pos = static_cast<int32_t>(tokens.size());
  const bool strip_first_space = tokens.size() == 1 && tokens[0] == tokenizer_.vocab().bos();
  stats.stop_reason = "length";
  for (int n = 0; o.n_predict < 0 || n < o.n_predict; ++n) {
    const int32_t next = out.token;
    if (IsEndOfGeneration(next)) {
      stats.stop_reason = "eos";
      break;
    }
    ++stats.generated_tokens;
    text.clear();
    stream.Push(next, &text);
    // After BOS alone, SentencePiece's first piece carries the space that marks a word start.
    if (strip_first_space && n == 0 && !text.empty() && text[0] == ' ') text.erase(0, 1);
    pending += text;
    bool stopped = false;
    for (const std::string& s : o.stop) {
      if (size_t at = pending.find(s); !s.empty() && at != std::string::npos) {
        pending.resize(at);
        stopped = true;
      }
    }
    // Emit what can no longer be the start of a stop string.
    size_t keep = 0;
    if (!stopped) {
      for (const std::string& s : o.stop) {
        for (size_t k = std::min(s.size() - 1, pending.size()); k > keep; --k) {
          if (pending.compare(pending.size() - k, k, s, 0, k) == 0) {
            keep = k;
            break;
          }
        }
      }
    }
    const std::string_view emit(pending.data(), pending.size() - keep);
    if (!emit.empty() && !on_text(emit)) {
      stats.stop_reason = "callback";
      break;
    }
    pending.erase(0, pending.size() - keep);
    if (stopped) {
      stats.stop_reason = "stop string";
      break;
    }
    if (pos + 1 >= n_ctx) {
      stats.stop_reason = "context";
      break;
    }
    batch.Clear();
    batch.Add(next, pos++, 0, true);
    TANDEM_RETURN_IF_ERROR(ex.Run(batch, step, &out));
  }
  text.clear();
  stream.Finish(&text);
  if (stats.stop_reason != "stop string" && !(pending + text).empty()) on_text(pending + text);
  stats.generate_seconds = Since(t1);
  return stats;
}

}  // namespace tandem::engine
