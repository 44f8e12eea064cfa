// Server: the OpenAI-compatible HTTP API of `tandem serve`, on an engine::Scheduler.
//
//   POST /v1/chat/completions, /v1/completions   streamed (server-sent events ending in
//                                                 "data: [DONE]") or not
//   GET  /v1/models, /health, /metrics (Prometheus text), /    (the chat page)
//   POST /tokenize, /detokenize                   llama-server's shapes
//
// Every request body is size-limited before it is parsed (413), parsed as JSON and checked
// field by field: a wrong type or range is a 400 naming the field. A prompt longer than a slot's
// context is a 400 with both numbers; a full queue a 503 with Retry-After; a missing or wrong API
// key a 401 (on every endpoint but / and /health); a failure of the model's executor (a worker
// that died) a 502 with its message, and /health answers 503 until the pipeline is back.
// Sampling defaults are llama-server's (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05), and
// a request without max_tokens runs until an end-of-generation token or its slot is full.
//
// Thread safety: Serve() blocks on the calling thread and handles requests on a pool of its
// own; Stop() may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/scheduler.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tandem::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see port())
  std::string api_key;              // empty: no key asked
  std::string model_name = "tandem";  // the id /v1/models lists
  tokenizer::ChatTemplate chat_template = tokenizer::ChatTemplate::kChatMl;
  size_t max_body_bytes = 4u << 20;
  int http_threads = 64;            // connections handled at once (streams hold one each)
  // Every request's defaults (llama-server's command line: --temp, --top-k, ..., -n, --ignore-eos);
  // a request's own fields override them. `sampling` starts at llama-server's defaults.
  sampling::SamplerParams sampling;
  int n_predict = -1;  // tokens per reply without max_tokens; -1: to an end token or the slot's end
  bool ignore_eos = false;
  // Per stage, its node's name, for the per-stage figures of /metrics.
  std::vector<std::string> stage_names;
};

class Server {
 public:
  Server(const tokenizer::Tokenizer& tokenizer, engine::Scheduler& scheduler, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket (IOError naming host and port if it cannot).
  Status Bind();
  int port() const;
  // Serves until Stop(). REQUIRES: Bind() succeeded.
  void Serve();
  // True once Serve() accepts connections.
  bool listening() const;
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::server
