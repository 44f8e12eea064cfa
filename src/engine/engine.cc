#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "tokenizer/stream_decoder.h"

namespace tandem::engine {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Engine::Engine(std::unique_ptr<model::Model> m, tokenizer::Tokenizer t, const EngineOptions& o)
    : model_(std::move(m)), tokenizer_(std::move(t)), options_(o) {
  const int64_t n_ctx = std::min(o.n_ctx, model_->params().n_ctx_train);
  context_ = std::make_unique<model::Context>(*model_, n_ctx, o.n_threads);
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
  return std::unique_ptr<Engine>(new Engine(std::move(mp), std::move(t).value(), options));
}

Result<GenerateStats> Engine::Generate(std::string_view prompt, const GenerateOptions& o,
                                       const std::function<bool(std::string_view)>& on_text) {
  GenerateStats stats;
  TANDEM_ASSIGN_OR_RETURN(sampling::Sampler sampler, sampling::Sampler::Create(o.sampling));
  tokenizer::EncodeOptions eo;
  eo.parse_special = o.parse_special;
  TANDEM_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, tokenizer_.Encode(prompt, eo));
  if (tokens.empty()) {
    const int32_t bos = tokenizer_.vocab().bos();
    if (bos == tokenizer::kNoToken) return Status::InvalidArgument("empty prompt and no BOS token");
    tokens.push_back(bos);
  }
  model::Context& ctx = *context_;
  ctx.cache().Clear();
  const int64_t n_ctx = ctx.cache().n_ctx();
  if (static_cast<int64_t>(tokens.size()) >= n_ctx) {
    return Status::OutOfRange("the prompt has " + std::to_string(tokens.size()) +
                              " tokens but the context holds " + std::to_string(n_ctx) +
                              " (raise -c)");
  }
  for (int32_t t : tokens) sampler.Accept(t);

  // Prompt, in batches of n_batch; logits for the last token only.
  const auto t0 = std::chrono::steady_clock::now();
  model::Batch batch;
  for (size_t i = 0; i < tokens.size(); i += options_.n_batch) {
    batch.Clear();
    const size_t end = std::min(tokens.size(), i + static_cast<size_t>(options_.n_batch));
    for (size_t j = i; j < end; ++j) {
      batch.Add(tokens[j], static_cast<int32_t>(j), 0, j + 1 == tokens.size());
    }
    TANDEM_RETURN_IF_ERROR(ctx.Decode(batch));
  }
  stats.prompt_tokens = static_cast<int64_t>(tokens.size());
  stats.prompt_seconds = Since(t0);

  // Generation: sample, stream the text, feed the token back.
  const auto t1 = std::chrono::steady_clock::now();
  tokenizer::DetokenizeStream stream(tokenizer_);
  std::string text, pending;  // pending: text held back while it could start a stop string
  const int64_t n_vocab = model_->params().n_vocab;
  int32_t pos = static_cast<int32_t>(tokens.size());
  const bool strip_first_space = tokens.size() == 1 && tokens[0] == tokenizer_.vocab().bos();
  stats.stop_reason = "length";
  for (int n = 0; o.n_predict < 0 || n < o.n_predict; ++n) {
    TANDEM_ASSIGN_OR_RETURN(int32_t next, sampler.Sample({ctx.logits(), static_cast<size_t>(n_vocab)}));
    if (IsEndOfGeneration(next)) {
      stats.stop_reason = "eos";
      break;
    }
    sampler.Accept(next);
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
    const std::string_view out(pending.data(), pending.size() - keep);
    if (!out.empty() && !on_text(out)) {
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
    TANDEM_RETURN_IF_ERROR(ctx.Decode(batch));
  }
  text.clear();
  stream.Finish(&text);
  if (stats.stop_reason != "stop string" && !(pending + text).empty()) on_text(pending + text);
  stats.generate_seconds = Since(t1);
  return stats;
}

}  // namespace tandem::engine
