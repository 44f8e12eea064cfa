#include "server/server.h"

#include <httplib.h>
#include <sodium.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "server/chat_page.h"

namespace tandem::server {
namespace {

using json = nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t UnixTime() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// An error answer: HTTP status, message, and the request field it is about (if any).
struct HttpError {
  int status = 400;
  std::string message;
  std::string param;
};

void SendError(httplib::Response& res, const HttpError& e) {
  const char* type = e.status == 401   ? "authentication_error"
                     : e.status == 503 ? "unavailable_error"
                     : e.status >= 500 ? "server_error"
                                       : "invalid_request_error";
  json err = {{"message", e.message}, {"type", type}, {"code", e.status}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(Dump(json{{"error", err}}), "application/json");
}

// Reads the fields of a request body, each checked for type and range; the first problem wins.
class Fields {
 public:
  explicit Fields(const json& body) : j_(body) {}

  const std::optional<HttpError>& error() const { return error_; }
  bool has(const char* name) const { return j_.contains(name) && !j_.at(name).is_null(); }
  const json& at(const char* name) const { return j_.at(name); }

  void Number(const char* name, float* out, double lo, double hi) {
    if (error_ || !has(name)) return;
    const json& v = j_.at(name);
    if (!v.is_number()) return Fail(name, "must be a number");
    const double d = v.get<double>();
    if (!(d >= lo && d <= hi)) return Fail(name, "must be between " + Fmt(lo) + " and " + Fmt(hi));
    *out = static_cast<float>(d);
  }
  void Int(const char* name, int64_t* out, int64_t lo, int64_t hi) {
    if (error_ || !has(name)) return;
    const json& v = j_.at(name);
    if (!v.is_number_integer()) return Fail(name, "must be an integer");
    const int64_t i = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                          ? INT64_MAX
                          : v.get<int64_t>();
    if (i < lo || i > hi) return Fail(name, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    *out = i;
  }
  void Bool(const char* name, bool* out) {
    if (error_ || !has(name)) return;
    const json& v = j_.at(name);
    if (!v.is_boolean()) return Fail(name, "must be true or false");
    *out = v.get<bool>();
  }
  void Fail(const std::string& name, const std::string& what) {
    if (!error_) error_ = HttpError{400, "'" + name + "' " + what, name};
  }

 private:
  static std::string Fmt(double d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", d);
    return buf;
  }
  const json& j_;
  std::optional<HttpError> error_;
};

// What a completion request asks, beyond its prompt.
struct Params {
  engine::Request req;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int64_t top_logprobs = 0;
};

// The fields both endpoints share. `chat` selects the chat API's logprobs fields.
void ReadParams(Fields& f, bool chat, const ServerOptions& o, Params* p) {
  engine::Request& r = p->req;
  r.ignore_eos = o.ignore_eos;
  r.sampling = o.sampling;
  int64_t n_predict = o.n_predict;
  f.Int("n_predict", &n_predict, -1, 1 << 24);
  f.Int("max_tokens", &n_predict, 0, 1 << 24);
  f.Int("max_completion_tokens", &n_predict, 0, 1 << 24);
  r.n_predict = static_cast<int>(n_predict);
  f.Number("temperature", &r.sampling.temperature, 0, 2);
  f.Number("top_p", &r.sampling.top_p, 0, 1);
  f.Number("min_p", &r.sampling.min_p, 0, 1);
  int64_t top_k = r.sampling.top_k;
  f.Int("top_k", &top_k, 0, 1 << 20);
  r.sampling.top_k = static_cast<int>(top_k);
  f.Number("presence_penalty", &r.sampling.presence_penalty, -2, 2);
  f.Number("frequency_penalty", &r.sampling.frequency_penalty, -2, 2);
  f.Number("repeat_penalty", &r.sampling.repeat_penalty, 0, 10);
  int64_t repeat_last_n = r.sampling.repeat_last_n;
  f.Int("repeat_last_n", &repeat_last_n, 0, sampling::kMaxRepeatLastN);
  r.sampling.repeat_last_n = static_cast<int>(repeat_last_n);
  if (f.has("seed")) {
    int64_t seed = -1;
    f.Int("seed", &seed, INT64_MIN, INT64_MAX);
    r.sampling.seed = seed < 0 ? sampling::kRandomSeed : static_cast<uint64_t>(seed) & 0x7fffffffu;
  }
  f.Bool("ignore_eos", &r.ignore_eos);
  f.Bool("stream", &p->stream);
  int64_t n = 1;
  f.Int("n", &n, 1, 1 << 20);
  if (n != 1) f.Fail("n", "must be 1 (one choice per request)");
  if (f.has("stream_options")) {
    const json& so = f.at("stream_options");
    if (!so.is_object()) {
      f.Fail("stream_options", "must be an object");
    } else if (so.contains("include_usage") && !so.at("include_usage").is_null()) {
      if (!so.at("include_usage").is_boolean()) {
        f.Fail("stream_options.include_usage", "must be true or false");
      } else {
        p->include_usage = so.at("include_usage").get<bool>();
      }
    }
  }
  if (f.has("stop")) {
    const json& s = f.at("stop");
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 16) {
      for (const json& x : s) {
        if (!x.is_string()) return f.Fail("stop", "must be a string or an array of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      f.Fail("stop", "must be a string or an array of at most 16 strings");
    }
    for (const std::string& x : r.stop) {
      if (x.size() > 256) f.Fail("stop", "strings must be at most 256 bytes");
    }
  }
  if (chat) {
    f.Bool("logprobs", &p->logprobs);
    f.Int("top_logprobs", &p->top_logprobs, 0, 20);
    if (f.has("top_logprobs") && !p->logprobs) f.Fail("top_logprobs", "needs 'logprobs': true");
  } else if (f.has("logprobs")) {
    // The completions API's logprobs is the number of alternatives (0..5).
    f.Int("logprobs", &p->top_logprobs, 0, 5);
    p->logprobs = true;
  }
  r.top_logprobs = p->logprobs ? static_cast<int>(p->top_logprobs) : -1;
}

std::optional<HttpError> ParseBody(const httplib::Request& req, json* body) {
  *body = json::parse(req.body, nullptr, false);
  if (body->is_discarded()) return HttpError{400, "the request body is not valid JSON"};
  if (!body->is_object()) return HttpError{400, "the request body must be a JSON object"};
  return std::nullopt;
}

json Usage(const engine::Event& done) {
  return {{"prompt_tokens", done.prompt_tokens},
          {"completion_tokens", done.completion_tokens},
          {"total_tokens", done.prompt_tokens + done.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", done.cached_tokens}}}};
}

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

// Connections the kernel completes before the server accepts them (the system's own limit,
// net.core.somaxconn, caps it).
constexpr int kListenBacklog = 1024;

struct Server::Impl {
  const tokenizer::Tokenizer& tok;
  engine::Scheduler& sched;
  ServerOptions o;
  httplib::Server http;
  int bound_port = -1;
  socket_t listen_socket = INVALID_SOCKET;  // set by the socket-options hook while binding
  std::atomic<uint64_t> next_id{0};
  std::mutex mu;
  std::map<int, uint64_t> responses;  // by HTTP status
  uint64_t http_requests = 0;

  Impl(const tokenizer::Tokenizer& t, engine::Scheduler& s, ServerOptions opt)
      : tok(t), sched(s), o(std::move(opt)) {}

  std::string NewId(const char* prefix) { return prefix + std::to_string(UnixTime()) + "-" + std::to_string(++next_id); }

  bool Authorized(const httplib::Request& req) const {
    if (o.api_key.empty()) return true;
    const std::string want = "Bearer " + o.api_key;
    const std::string got = req.get_header_value("Authorization");
    return got.size() == want.size() && sodium_memcmp(got.data(), want.data(), want.size()) == 0;
  }

  // Error statuses of a request that failed after it was accepted.
  static HttpError FromStreamError(const Status& st) {
    return HttpError{502, "the model failed: " + st.ToString()};
  }
  static HttpError FromSubmitError(const Status& st) {
    if (st.code() == Code::kUnavailable) return HttpError{503, st.message()};
    return HttpError{400, st.message(), st.code() == Code::kOutOfRange ? "prompt" : ""};
  }

  json LogprobsChat(const std::vector<engine::TokenLogprob>& lps) const {
    json content = json::array();
    for (const engine::TokenLogprob& t : lps) {
      const std::string piece = tok.Piece(t.token, true);
      json top = json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string p = tok.Piece(id, true);
        top.push_back({{"token", p}, {"logprob", lp}, {"bytes", Bytes(p)}});
      }
      content.push_back({{"token", piece}, {"logprob", t.logprob}, {"bytes", Bytes(piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }

  json LogprobsCompletion(const std::vector<engine::TokenLogprob>& lps, size_t* offset) const {
    json tokens = json::array(), lp = json::array(), top = json::array(), offsets = json::array();
    for (const engine::TokenLogprob& t : lps) {
      const std::string piece = tok.Piece(t.token, true);
      tokens.push_back(piece);
      lp.push_back(t.logprob);
      json alt = json::object();
      for (const auto& [id, l] : t.top) alt[tok.Piece(id, true)] = l;
      top.push_back(alt);
      offsets.push_back(*offset);
      *offset += piece.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", offsets}};
  }

  // Runs an accepted request and writes the answer: streamed or whole.
  void Respond(const httplib::Request&, httplib::Response& res, Params p, bool chat) {
    Result<std::shared_ptr<engine::Stream>> submitted = sched.Submit(std::move(p.req));
    if (!submitted.ok()) return SendError(res, FromSubmitError(submitted.status()));
    std::shared_ptr<engine::Stream> stream = *submitted;
    // The first event decides the status: a request that fails before any text gets an error
    // status rather than a 200 stream that breaks.
    engine::Event first;
    while (!stream->Next(&first, 1000)) {
    }
    if (first.kind == engine::Event::Kind::kError) return SendError(res, FromStreamError(first.error));
    const std::string id = NewId(chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = UnixTime();
    const std::string model = o.model_name;
    const bool want_logprobs = p.logprobs;

    if (!p.stream) {
      std::string text;
      std::vector<engine::TokenLogprob> lps;
      engine::Event e = std::move(first);
      for (;;) {
        if (e.kind == engine::Event::Kind::kError) return SendError(res, FromStreamError(e.error));
        if (e.kind == engine::Event::Kind::kDone) break;
        text += e.text;
        lps.insert(lps.end(), e.logprobs.begin(), e.logprobs.end());
        while (!stream->Next(&e, 1000)) {
        }
      }
      json choice = {{"index", 0}, {"finish_reason", e.finish_reason}};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
        choice["logprobs"] = want_logprobs ? LogprobsChat(lps) : json(nullptr);
      } else {
        size_t offset = 0;
        choice["text"] = text;
        choice["logprobs"] = want_logprobs ? LogprobsCompletion(lps, &offset) : json(nullptr);
      }
      json body = {{"id", id},
                   {"object", chat ? "chat.completion" : "text_completion"},
                   {"created", created},
                   {"model", model},
                   {"choices", json::array({choice})},
                   {"usage", Usage(e)},
                   {"timings", {{"time_to_first_token_ms", e.time_to_first_token_ms}, {"generate_ms", e.generate_ms}}}};
      res.set_content(Dump(body), "application/json");
      return;
    }

    const bool include_usage = p.include_usage;
    auto pending = std::make_shared<std::optional<engine::Event>>(std::move(first));
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, stream, pending, id, created, model, chat, want_logprobs, include_usage](size_t, httplib::DataSink& sink) {
          auto send = [&](const json& j) {
            const std::string s = "data: " + Dump(j) + "\n\n";
            return sink.write(s.data(), s.size());
          };
          auto chunk = [&](json delta_or_text, const json& finish, const json& logprobs) {
            json choice = {{"index", 0}, {"finish_reason", finish}};
            if (chat) {
              choice["delta"] = std::move(delta_or_text);
            } else {
              choice["text"] = std::move(delta_or_text);
            }
            choice["logprobs"] = logprobs;
            return json{{"id", id},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", model},
                        {"choices", json::array({choice})}};
          };
          size_t offset = 0;
          if (chat && !send(chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) {
            stream->Cancel();
            return false;
          }
          for (;;) {
            engine::Event e;
            if (pending->has_value()) {
              e = std::move(**pending);
              pending->reset();
            } else if (!stream->Next(&e, 1000)) {
              // Nothing for a second: a comment line finds out whether the client is still there.
              static const char kAlive[] = ": keep-alive\n\n";
              if (!sink.write(kAlive, sizeof kAlive - 1)) {
                stream->Cancel();
                return false;
              }
              continue;
            }
            if (e.kind == engine::Event::Kind::kError) {
              const HttpError he = FromStreamError(e.error);
              send(json{{"error", {{"message", he.message}, {"type", "server_error"}, {"code", he.status}}}});
              sink.done();
              return true;
            }
            if (e.kind == engine::Event::Kind::kText) {
              json lp = nullptr;
              if (want_logprobs) lp = chat ? LogprobsChat(e.logprobs) : LogprobsCompletion(e.logprobs, &offset);
              json content = chat ? json{{"content", e.text}} : json(e.text);
              if (!send(chunk(std::move(content), nullptr, lp))) {
                stream->Cancel();
                return false;
              }
              continue;
            }
            // Done.
            bool ok = send(chunk(chat ? json::object() : json(""), e.finish_reason, nullptr));
            if (ok && include_usage) {
              ok = send(json{{"id", id},
                             {"object", chat ? "chat.completion.chunk" : "text_completion"},
                             {"created", created},
                             {"model", model},
                             {"choices", json::array()},
                             {"usage", Usage(e)}});
            }
            static const char kDone[] = "data: [DONE]\n\n";
            if (ok) sink.write(kDone, sizeof kDone - 1);
            sink.done();
            return true;
          }
        },
        [stream](bool) { stream->Cancel(); });
  }

  void Chat(const httplib::Request& req, httplib::Response& res) {
    json body;
    if (auto e = ParseBody(req, &body)) return SendError(res, *e);
    Fields f(body);
    Params p;
    ReadParams(f, true, o, &p);
    if (f.error()) return SendError(res, *f.error());
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
      return SendError(res, {400, "'messages' must be a non-empty array of messages", "messages"});
    }
    std::vector<tokenizer::ChatMessage> messages;
    for (size_t i = 0; i < body["messages"].size(); ++i) {
      const json& m = body["messages"][i];
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) return SendError(res, {400, "'" + at + "' must be an object", at});
      if (!m.contains("role") || !m["role"].is_string()) {
        return SendError(res, {400, "'" + at + ".role' must be a string", at + ".role"});
      }
      tokenizer::ChatMessage cm;
      cm.role = m["role"].get<std::string>();
      if (cm.role == "developer") cm.role = "system";  // OpenAI's newer name for it
      if (cm.role != "system" && cm.role != "user" && cm.role != "assistant") {
        return SendError(res, {400, "'" + at + ".role' must be system, user or assistant", at + ".role"});
      }
      const json c = m.contains("content") ? m["content"] : json(nullptr);
      if (c.is_string()) {
        cm.content = c.get<std::string>();
      } else if (c.is_array()) {
        // Content parts: only text.
        for (const json& part : c) {
          if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
              !part["text"].is_string()) {
            return SendError(res, {400, "'" + at + ".content' parts must be {\"type\": \"text\", \"text\": ...}",
                                   at + ".content"});
          }
          cm.content += part["text"].get<std::string>();
        }
      } else if (!c.is_null()) {
        return SendError(res, {400, "'" + at + ".content' must be a string or an array of text parts", at + ".content"});
      }
      messages.push_back(std::move(cm));
    }
    Result<std::string> prompt = tokenizer::RenderChat(o.chat_template, messages, true);
    if (!prompt.ok()) return SendError(res, {400, prompt.status().message(), "messages"});
    tokenizer::EncodeOptions eo;
    eo.parse_special = true;
    Result<std::vector<int32_t>> ids = tok.Encode(*prompt, eo);
    if (!ids.ok()) return SendError(res, {400, ids.status().message(), "messages"});
    p.req.prompt = std::move(*ids);
    Respond(req, res, std::move(p), true);
  }

  void Completion(const httplib::Request& req, httplib::Response& res) {
    json body;
    if (auto e = ParseBody(req, &body)) return SendError(res, *e);
    Fields f(body);
    Params p;
    ReadParams(f, false, o, &p);
    if (f.error()) return SendError(res, *f.error());
    if (!body.contains("prompt")) return SendError(res, {400, "'prompt' is required", "prompt"});
    json pr = body["prompt"];
    if (pr.is_array() && pr.size() == 1 && pr[0].is_string()) pr = pr[0];
    tokenizer::EncodeOptions eo;
    eo.parse_special = true;
    if (pr.is_string()) {
      Result<std::vector<int32_t>> ids = tok.Encode(pr.get<std::string>(), eo);
      if (!ids.ok()) return SendError(res, {400, ids.status().message(), "prompt"});
      p.req.prompt = std::move(*ids);
    } else if (pr.is_array()) {
      for (const json& t : pr) {
        if (!t.is_number_integer()) {
          return SendError(res, {400, "'prompt' must be a string, one string in an array, or an array of token ids",
                                 "prompt"});
        }
        const int64_t id = t.get<int64_t>();
        if (!tok.vocab().Contains(static_cast<int32_t>(std::clamp<int64_t>(id, -1, INT32_MAX)))) {
          return SendError(res, {400, "'prompt' holds token id " + std::to_string(id) + ", outside the vocabulary",
                                 "prompt"});
        }
        p.req.prompt.push_back(static_cast<int32_t>(id));
      }
    } else {
      return SendError(res, {400, "'prompt' must be a string, one string in an array, or an array of token ids",
                             "prompt"});
    }
    if (p.req.prompt.empty()) {
      const int32_t bos = tok.vocab().bos();
      if (bos == tokenizer::kNoToken) return SendError(res, {400, "the prompt is empty and the model has no BOS token", "prompt"});
      p.req.prompt.push_back(bos);
    }
    Respond(req, res, std::move(p), false);
  }

  void Tokenize(const httplib::Request& req, httplib::Response& res) {
    json body;
    if (auto e = ParseBody(req, &body)) return SendError(res, *e);
    if (!body.contains("content") || !body["content"].is_string()) {
      return SendError(res, {400, "'content' must be a string", "content"});
    }
    Fields f(body);
    bool add_special = false, with_pieces = false;
    f.Bool("add_special", &add_special);
    f.Bool("with_pieces", &with_pieces);
    if (f.error()) return SendError(res, *f.error());
    tokenizer::EncodeOptions eo;
    eo.add_special = add_special;
    eo.parse_special = true;
    Result<std::vector<int32_t>> ids = tok.Encode(body["content"].get<std::string>(), eo);
    if (!ids.ok()) return SendError(res, {400, ids.status().message(), "content"});
    json tokens = json::array();
    for (int32_t id : *ids) {
      if (with_pieces) {
        tokens.push_back({{"id", id}, {"piece", tok.Piece(id, true)}});
      } else {
        tokens.push_back(id);
      }
    }
    res.set_content(Dump(json{{"tokens", tokens}}), "application/json");
  }

  void Detokenize(const httplib::Request& req, httplib::Response& res) {
    json body;
    if (auto e = ParseBody(req, &body)) return SendError(res, *e);
    if (!body.contains("tokens") || !body["tokens"].is_array()) {
      return SendError(res, {400, "'tokens' must be an array of token ids", "tokens"});
    }
    std::vector<int32_t> ids;
    for (const json& t : body["tokens"]) {
      if (!t.is_number_integer() || !tok.vocab().Contains(static_cast<int32_t>(std::clamp<int64_t>(t.get<int64_t>(), -1, INT32_MAX)))) {
        return SendError(res, {400, "'tokens' must hold token ids of the vocabulary (0.." +
                                        std::to_string(tok.vocab().size() - 1) + ")",
                               "tokens"});
      }
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    res.set_content(Dump(json{{"content", tok.Detokenize(ids, true)}}), "application/json");
  }

  void Metrics(httplib::Response& res) {
    const engine::SchedulerMetrics m = sched.metrics();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", v);
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + buf + "\n";
    };
    metric("tandem_requests_total", "counter", "Completion requests accepted.", static_cast<double>(m.requests));
    metric("tandem_requests_failed_total", "counter", "Requests that ended with an error.", static_cast<double>(m.requests_failed));
    metric("tandem_requests_cancelled_total", "counter", "Requests cancelled by their client.", static_cast<double>(m.requests_cancelled));
    metric("tandem_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", static_cast<double>(m.prompt_tokens));
    metric("tandem_prompt_tokens_cached_total", "counter", "Prompt tokens found in a slot's cache.",
           static_cast<double>(m.prompt_tokens_cached));
    metric("tandem_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(m.generated_tokens));
    metric("tandem_tokens_per_second", "gauge", "Generated tokens per second of decoding, since start.",
           m.generate_seconds > 0 ? static_cast<double>(m.generated_tokens) / m.generate_seconds : 0.0);
    metric("tandem_queue_depth", "gauge", "Requests waiting for a slot.", m.queue_depth);
    metric("tandem_slots_busy", "gauge", "Slots serving a request.", m.slots_busy);
    metric("tandem_slots_total", "gauge", "Slots (-np).", m.n_slots);
    metric("tandem_steps_total", "counter", "Batches run.", static_cast<double>(m.steps));
    metric("tandem_speculative_rounds_total", "counter", "Decode steps that verified guessed tokens.",
           static_cast<double>(m.speculation.rounds));
    metric("tandem_speculative_guesses_total", "counter", "Guessed tokens verified.",
           static_cast<double>(m.speculation.guesses));
    metric("tandem_speculative_accepted_total", "counter", "Guessed tokens accepted.",
           static_cast<double>(m.speculation.accepted));
    out += "# HELP tandem_time_to_first_token_seconds Time from arrival to the first token.\n"
           "# TYPE tandem_time_to_first_token_seconds summary\n";
    char buf[160];
    std::snprintf(buf, sizeof buf, "tandem_time_to_first_token_seconds_sum %.6f\ntandem_time_to_first_token_seconds_count %llu\n",
                  m.time_to_first_token_ms_sum / 1000, static_cast<unsigned long long>(m.time_to_first_token_count));
    out += buf;
    out += "# HELP tandem_stage_milliseconds_total Compute milliseconds per pipeline stage.\n"
           "# TYPE tandem_stage_milliseconds_total counter\n";
    for (size_t i = 0; i < m.stage_ms_sum.size(); ++i) {
      const std::string node = i < o.stage_names.size() ? o.stage_names[i] : "?";
      std::snprintf(buf, sizeof buf, "tandem_stage_milliseconds_total{stage=\"%zu\",node=\"%s\"} %.3f\n", i,
                    node.c_str(), m.stage_ms_sum[i]);
      out += buf;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      out += "# HELP tandem_http_responses_total HTTP responses by status.\n# TYPE tandem_http_responses_total counter\n";
      for (const auto& [code, count] : responses) {
        out += "tandem_http_responses_total{code=\"" + std::to_string(code) + "\"} " + std::to_string(count) + "\n";
      }
    }
    res.set_content(out, "text/plain; version=0.0.4");
  }

  void Routes() {
    // cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's
    // library): when more than that many clients connect at once while the accept thread waits
    // for a CPU, the kernel drops their SYNs and they wait for TCP's retransmission (1 s, then
    // 3). The listening socket's options hook gives its descriptor; Bind() listens again on it
    // with a deeper queue.
    http.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_socket = sock;
    });
    http.set_payload_max_length(o.max_body_bytes);
    http.set_read_timeout(30, 0);
    http.set_write_timeout(30, 0);
    const int threads = std::max(4, o.http_threads);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/" || req.path == "/health" || Authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
      SendError(res, {401, o.api_key.empty() ? "" : "a valid API key is required (Authorization: Bearer KEY)"});
      return httplib::Server::HandlerResponse::Handled;
    });
    http.set_logger([this](const httplib::Request&, const httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu);
      responses[res.status]++;
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      SendError(res, {500, "internal error"});
    });
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(kChatPage, "text/html; charset=utf-8");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (sched.healthy()) {
        res.set_content(R"({"status":"ok"})", "application/json");
      } else {
        res.status = 503;
        res.set_content(Dump(json{{"status", "error"}, {"reason", sched.down_reason()}}), "application/json");
      }
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { Metrics(res); });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json m = {{"id", o.model_name}, {"object", "model"}, {"created", UnixTime()}, {"owned_by", "tandem"}};
      res.set_content(Dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) { Chat(q, r); });
    http.Post("/chat/completions", [this](const httplib::Request& q, httplib::Response& r) { Chat(q, r); });
    http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) { Completion(q, r); });
    http.Post("/completions", [this](const httplib::Request& q, httplib::Response& r) { Completion(q, r); });
    http.Post("/tokenize", [this](const httplib::Request& q, httplib::Response& r) { Tokenize(q, r); });
    http.Post("/detokenize", [this](const httplib::Request& q, httplib::Response& r) { Detokenize(q, r); });
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413) return SendError(res, {413, "the request body is too large"});
      if (res.status == 404) return SendError(res, {404, "no such endpoint"});
    });
  }
};

Server::Server(const tokenizer::Tokenizer& tokenizer, engine::Scheduler& scheduler, ServerOptions options)
    : impl_(std::make_unique<Impl>(tokenizer, scheduler, std::move(options))) {
  impl_->Routes();
}

Server::~Server() { Stop(); }

Status Server::Bind() {
  Impl& m = *impl_;
  if (m.o.port == 0) {
    m.bound_port = m.http.bind_to_any_port(m.o.host);
  } else {
    m.bound_port = m.http.bind_to_port(m.o.host, m.o.port) ? m.o.port : -1;
  }
  if (m.bound_port < 0) {
    return Status::IOError("cannot listen on " + m.o.host + ":" + std::to_string(m.o.port) +
                           " (in use, or not an address of this machine)");
  }
  if (m.listen_socket == INVALID_SOCKET || ::listen(m.listen_socket, kListenBacklog) != 0) {
    return Status::IOError("cannot set the connection queue of " + m.o.host + ":" + std::to_string(m.bound_port) +
                           ": " + std::strerror(errno));
  }
  return Status::Ok();
}

int Server::port() const { return impl_->bound_port; }

void Server::Serve() { impl_->http.listen_after_bind(); }

bool Server::listening() const { return impl_->http.is_running(); }

void Server::Stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}

}  // namespace tandem::server
