#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <utility>

#include "engine/prefix.h"
#include "engine/stop_strings.h"
#include "tokenizer/stream_decoder.h"

namespace tandem::engine {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The log-probability of `token` under `row` (log-softmax), and the `top` most probable tokens.
TokenLogprob Logprobs(const float* row, int64_t n_vocab, int32_t token, int top) {
  float mx = row[0];
  for (int64_t i = 1; i < n_vocab; ++i) mx = std::max(mx, row[i]);
  double sum = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(row[i] - mx));
  const float log_z = mx + static_cast<float>(std::log(sum));
  TokenLogprob t;
  t.token = token;
  t.logprob = row[token] - log_z;
  if (top > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) ids[i] = static_cast<int32_t>(i);
    const int64_t k = std::min<int64_t>(top, n_vocab);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int64_t i = 0; i < k; ++i) t.top.emplace_back(ids[i], row[ids[i]] - log_z);
  }
  return t;
}

}  // namespace

bool Stream::Next(Event* e, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); })) return false;
  *e = std::move(events_.front());
  events_.pop_front();
  return true;
}

void Stream::Push(Event e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

struct Scheduler::Slot {
  int32_t id = 0;
  int group = 0;
  std::vector<int32_t> cached;  // tokens whose cells this slot holds, by position
  size_t seen = 0;              // the most it has held since it was emptied (engine/prefix.h)
  uint64_t last_used = 0;

  // The request being served (stream null: the slot is free).
  std::shared_ptr<Stream> stream;
  Request req;
  sampling::SamplerParams sampling;  // the request's, with the seed drawn and bans applied
  uint64_t order = 0;     // when it got the slot (the oldest prompt is read first)
  bool in_flight = false;
  bool decoding = false;  // the prompt is done: `next` is fed at position cached.size()
  int32_t next = -1;
  int64_t reused = 0, generated = 0;
  std::unique_ptr<tokenizer::DetokenizeStream> detok;
  std::unique_ptr<StopStrings> stops;
  double queued_at = 0, first_token_at = 0;
  // Speculation: the guesses fed after `next` in the batch in flight, and what drafting them cost.
  std::unique_ptr<SpeculationTuner> tuner;
  std::vector<int32_t> guesses, draft_tokens;
  int drafted = 0;
  double draft_seconds = 0;
};

struct Scheduler::InFlight {
  uint64_t ticket = 0;
  int group = 0;
  std::vector<Slot*> decode;  // slots that fed one token and their guesses (their rows come first)
  struct Chunk {
    Slot* slot;
    int64_t rows;
    bool done;  // the chunk ends the prompt: its last row is marked
  };
  std::vector<Chunk> prompts;  // prompt chunks, after the decode rows, in this order
  bool logits = false;
  double started = 0;
};

Scheduler::Scheduler(std::unique_ptr<exec::Executor> executor, const tokenizer::Tokenizer& tokenizer,
                     std::function<bool(int32_t)> is_end, const SchedulerOptions& options)
    : ex_(std::move(executor)), tok_(tokenizer), is_end_(std::move(is_end)), o_(options) {
  o_.n_slots = std::max(1, o_.n_slots);
  o_.n_ctx = std::min(o_.n_ctx, ex_->n_ctx());
  slot_ctx_ = o_.n_ctx / o_.n_slots;
  n_vocab_ = ex_->params().n_vocab;
  params_ = ex_->params();
  depth_ = std::max(1, std::min(o_.groups > 0 ? o_.groups : ex_->pipeline_depth(), o_.n_slots));
  for (int i = 0; i < o_.n_slots; ++i) {
    auto s = std::make_unique<Slot>();
    s->id = i;
    s->group = i % depth_;
    if (o_.drafter != nullptr) s->tuner = std::make_unique<SpeculationTuner>(o_.draft_min, o_.draft_max);
    slots_.push_back(std::move(s));
  }
  metrics_.n_slots = o_.n_slots;
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<std::shared_ptr<Stream>> Scheduler::Submit(Request r) {
  if (r.prompt.empty()) return Status::InvalidArgument("the prompt has no tokens");
  for (int32_t t : r.prompt) {
    if (t < 0 || t >= n_vocab_) {
      return Status::InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary of " +
                                     std::to_string(n_vocab_));
    }
  }
  if (static_cast<int64_t>(r.prompt.size()) >= slot_ctx_) {
    return Status::OutOfRange("the prompt has " + std::to_string(r.prompt.size()) +
                              " tokens but a slot's context holds " + std::to_string(slot_ctx_) +
                              " (context " + std::to_string(o_.n_ctx) + " over " +
                              std::to_string(o_.n_slots) + " slots)");
  }
  if (r.top_logprobs > 20) return Status::InvalidArgument("top_logprobs must be 0..20");
  TANDEM_RETURN_IF_ERROR(sampling::Sampler::Create(r.sampling).status());
  auto stream = std::make_shared<Stream>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(queue_.size()) >= o_.max_queue) {
      return Status::Unavailable("the queue is full (" + std::to_string(o_.max_queue) + " requests waiting)");
    }
    queue_.push_back({std::move(r), stream, Now()});
    metrics_.queue_depth = static_cast<int>(queue_.size());
  }
  cv_.notify_all();
  return stream;
}

SchedulerMetrics Scheduler::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

std::string Scheduler::down_reason() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!down_reason_.empty()) return down_reason_;
  }
  std::lock_guard<std::mutex> lock(ex_mu_);
  return ex_ ? ex_->Health().ToString() : "no executor";
}

std::vector<exec::StageInfo> Scheduler::stages() const {
  std::lock_guard<std::mutex> lock(ex_mu_);
  return ex_ ? ex_->stages() : std::vector<exec::StageInfo>{};
}

bool Scheduler::healthy() const {
  if (!healthy_) return false;
  std::lock_guard<std::mutex> lock(ex_mu_);
  return ex_ != nullptr && ex_->Health().ok();
}

bool Scheduler::AssignSlots() {
  bool any = false;
  while (!queue_.empty()) {
    const Pending& p = queue_.front();
    // The free slot whose tokens make up more than half of the prompt's beginning (a chat's next
    // turn, the same prompt again), the longest such prefix first; else the least recently used
    // free slot, so that an unrelated request does not evict a conversation for a shared BOS.
    Slot* best = nullptr;
    size_t best_len = 0;
    Slot* lru = nullptr;
    for (auto& s : slots_) {
      if (s->stream || s->in_flight) continue;
      if (lru == nullptr || s->last_used < lru->last_used) lru = s.get();
      size_t seen = s->seen;
      const size_t n = ReusablePrefix(params_, s->cached, p.request.prompt, &seen);
      if (2 * n > p.request.prompt.size() && n > best_len) {
        best = s.get();
        best_len = n;
      }
    }
    if (best == nullptr) best = lru;
    if (best == nullptr) break;
    best->req = std::move(queue_.front().request);
    best->stream = std::move(queue_.front().stream);
    best->queued_at = queue_.front().queued_at;
    queue_.pop_front();
    StartRequest(*best);
    any = true;
  }
  metrics_.queue_depth = static_cast<int>(queue_.size());
  return any;
}

void Scheduler::StartRequest(Slot& s) {
  const std::vector<int32_t>& prompt = s.req.prompt;
  // The last prompt token is computed: its logits give the first token.
  const size_t reuse = ReusablePrefix(params_, s.cached, prompt, &s.seen);
  if (reuse < s.cached.size()) pending_truncate_.push_back({s.id, static_cast<int32_t>(reuse)});
  s.cached.resize(reuse);
  s.reused = static_cast<int64_t>(reuse);
  s.generated = 0;
  s.decoding = false;
  s.next = -1;
  s.first_token_at = 0;
  s.order = ++clock_;
  s.last_used = clock_;
  s.sampling = s.req.sampling;
  if (s.sampling.seed == sampling::kRandomSeed) s.sampling.seed = std::random_device{}() & 0x7fffffff;
  if (s.req.ignore_eos) {
    for (int32_t t = 0; t < n_vocab_ && s.sampling.banned.size() < sampling::kMaxBannedTokens; ++t) {
      if (is_end_(t)) s.sampling.banned.push_back(t);
    }
  }
  s.detok = std::make_unique<tokenizer::DetokenizeStream>(tok_);
  s.stops = std::make_unique<StopStrings>(s.req.stop);
  metrics_.requests++;
  metrics_.prompt_tokens += prompt.size();
  metrics_.prompt_tokens_cached += reuse;
  metrics_.slots_busy++;
}

void Scheduler::ResetSlot(Slot& s) {
  // The request is gone: its cells are freed with the next batch.
  if (!s.cached.empty()) pending_truncate_.push_back({s.id, 0});
  s.cached.clear();
  s.seen = 0;
  if (s.stream) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.slots_busy--;
  }
  s.stream.reset();
  s.decoding = false;
}

void Scheduler::Finish(Slot& s, const std::string& reason) {
  std::string rest;
  s.detok->Finish(&rest);
  bool stopped = false;
  rest = s.stops->Push(rest, &stopped);
  if (!stopped) rest += s.stops->Flush();
  if (!rest.empty()) {
    Event t;
    t.text = std::move(rest);
    s.stream->Push(std::move(t));
  }
  Event e;
  e.kind = Event::Kind::kDone;
  e.finish_reason = reason;
  e.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
  e.cached_tokens = s.reused;
  e.completion_tokens = s.generated;
  const double now = Now();
  if (s.first_token_at > 0) {
    e.time_to_first_token_ms = (s.first_token_at - s.queued_at) * 1000;
    e.generate_ms = (now - s.first_token_at) * 1000;
  }
  s.stream->Push(std::move(e));
  s.stream.reset();
  s.decoding = false;
  s.last_used = ++clock_;
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.slots_busy--;
}

void Scheduler::Deliver(Slot& s, int32_t token, const float* logits_row) {
  if (s.first_token_at == 0) {
    s.first_token_at = Now();
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.time_to_first_token_ms_sum += (s.first_token_at - s.queued_at) * 1000;
    metrics_.time_to_first_token_count++;
  }
  if (!s.req.ignore_eos && is_end_(token)) return Finish(s, "stop");
  ++s.generated;
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.generated_tokens++;
  }
  std::string piece;
  s.detok->Push(token, &piece);
  // After BOS alone, SentencePiece's first piece carries the space that marks a word start.
  if (s.generated == 1 && s.req.prompt.size() == 1 && s.req.prompt[0] == tok_.vocab().bos() &&
      !piece.empty() && piece[0] == ' ') {
    piece.erase(0, 1);
  }
  bool stopped = false;
  Event e;
  e.text = s.stops->Push(piece, &stopped);
  if (s.req.top_logprobs >= 0 && logits_row != nullptr) {
    e.logprobs.push_back(Logprobs(logits_row, n_vocab_, token, s.req.top_logprobs));
  }
  if (!e.text.empty() || !e.logprobs.empty()) s.stream->Push(std::move(e));
  if (stopped) return Finish(s, "stop");
  if (s.req.n_predict >= 0 && s.generated >= s.req.n_predict) return Finish(s, "length");
  if (static_cast<int64_t>(s.cached.size()) + 1 >= slot_ctx_) return Finish(s, "length");
  s.next = token;
  s.decoding = true;
}

void Scheduler::Draft(Slot& s) {
  s.guesses.clear();
  s.drafted = 0;
  s.draft_seconds = 0;
  if (o_.drafter == nullptr) return;
  const int64_t pos = static_cast<int64_t>(s.cached.size());
  int64_t limit = std::min<int64_t>(o_.draft_max, slot_ctx_ - 2 - pos);
  if (s.req.n_predict >= 0) limit = std::min<int64_t>(limit, s.req.n_predict - s.generated - 1);
  if (limit <= 0) return;
  const int want = s.tuner->Choose(static_cast<int>(limit), o_.drafter->costly());
  if (want <= 0) return;
  s.draft_tokens.assign(s.cached.begin(), s.cached.end());
  s.draft_tokens.push_back(s.next);
  o_.drafter->set_banned(s.sampling.banned);
  // A drafter's failure costs the guesses, not the request.
  if (!o_.drafter->Draft(s.id, s.draft_tokens, want, &s.guesses, &s.draft_seconds).ok()) s.guesses.clear();
  if (static_cast<int>(s.guesses.size()) > want) s.guesses.resize(want);
  for (size_t i = 0; i < s.guesses.size(); ++i) {
    if (std::find(s.sampling.banned.begin(), s.sampling.banned.end(), s.guesses[i]) != s.sampling.banned.end()) {
      s.guesses.resize(i);
      break;
    }
  }
  if (o_.drafter->costly()) s.drafted = static_cast<int>(s.guesses.size());
}

bool Scheduler::SubmitGroup(int group, bool others_running) {
  auto f = std::make_unique<InFlight>();
  f->group = group;
  model::Batch b;
  exec::RunOptions ro;
  std::vector<int32_t> guesses;  // per marked row (RunOptions::guesses), when any slot guesses
  bool guessing = false;
  for (auto& s : slots_) {
    if (s->group != group || !s->stream || !s->decoding) continue;
    const int64_t pos = static_cast<int64_t>(s->cached.size());
    Draft(*s);
    b.Add(s->next, static_cast<int32_t>(pos), s->id, true);
    for (size_t i = 0; i < s->guesses.size(); ++i) {
      b.Add(s->guesses[i], static_cast<int32_t>(pos + 1 + static_cast<int64_t>(i)), s->id, true);
    }
    guesses.insert(guesses.end(), s->guesses.begin(), s->guesses.end());
    guesses.push_back(-1);
    guessing = guessing || !s->guesses.empty();
    f->decode.push_back(s.get());
    f->logits = f->logits || s->req.top_logprobs >= 0;
  }
  // Prompt chunks, oldest request first, up to the step's prompt budget: several short prompts
  // that arrive together start together; a long one is read over several steps.
  std::vector<Slot*> reading;
  for (auto& s : slots_) {
    if (s->group == group && s->stream && !s->decoding) reading.push_back(s.get());
  }
  std::sort(reading.begin(), reading.end(), [](const Slot* x, const Slot* y) { return x->order < y->order; });
  int64_t budget = std::max<int64_t>(
      1, (others_running || !f->decode.empty()) ? o_.prompt_chunk : o_.prompt_chunk_alone);
  for (Slot* p : reading) {
    if (budget <= 0) break;
    const std::vector<int32_t>& prompt = p->req.prompt;
    const int64_t start = static_cast<int64_t>(p->cached.size());
    const int64_t end = std::min<int64_t>(static_cast<int64_t>(prompt.size()), start + budget);
    for (int64_t j = start; j < end; ++j) {
      b.Add(prompt[j], static_cast<int32_t>(j), p->id, j + 1 == static_cast<int64_t>(prompt.size()));
    }
    budget -= end - start;
    const bool done = end == static_cast<int64_t>(prompt.size());
    f->prompts.push_back({p, end - start, done});
    if (done) {
      ro.samplers.push_back({p->id, p->sampling, prompt});
      f->logits = f->logits || p->req.top_logprobs >= 0;
      guesses.push_back(-1);
    }
  }
  if (guessing) ro.guesses = std::move(guesses);
  if (b.size() == 0) return false;
  bool marked = false;
  for (uint8_t l : b.logits) marked = marked || l;
  ro.sample = marked;
  ro.logits = f->logits;
  ro.truncate = std::move(pending_truncate_);
  pending_truncate_.clear();
  f->started = Now();
  Result<uint64_t> t = ex_->Submit(b, ro);
  if (!t.ok()) {
    FailAll(t.status());
    return false;
  }
  f->ticket = *t;
  for (Slot* s : f->decode) s->in_flight = true;
  for (const InFlight::Chunk& c : f->prompts) c.slot->in_flight = true;
  in_flight_.push_back(std::move(f));
  return true;
}

Status Scheduler::CollectOldest() {
  std::unique_ptr<InFlight> f = std::move(in_flight_.front());
  in_flight_.pop_front();
  exec::RunOutput out;
  Status st = ex_->Collect(f->ticket, &out);
  for (Slot* s : f->decode) s->in_flight = false;
  for (const InFlight::Chunk& c : f->prompts) c.slot->in_flight = false;
  if (!st.ok()) {
    FailAll(st);
    return st;
  }
  const double now = Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.steps++;
    if (!f->decode.empty()) metrics_.generate_seconds += now - f->started;
    if (metrics_.stage_ms_sum.size() < out.stage_ms.size()) metrics_.stage_ms_sum.resize(out.stage_ms.size());
    for (size_t i = 0; i < out.stage_ms.size(); ++i) metrics_.stage_ms_sum[i] += out.stage_ms[i];
  }
  // Every fed token's cells are now in the cache (a slot's guesses too, until truncated).
  size_t want = 0;
  for (Slot* s : f->decode) want += s->guesses.size() + 1;
  for (const InFlight::Chunk& c : f->prompts) want += c.done ? 1 : 0;
  if (out.tokens.size() != want) {
    Status bad = Status::Internal("the executor returned " + std::to_string(out.tokens.size()) + " tokens for " +
                                  std::to_string(want) + " rows");
    FailAll(bad);
    return bad;
  }
  size_t row = 0;  // marked rows, in order: each decoding slot's, then the finished prompts'
  auto logits_row = [&](size_t r) -> const float* {
    return (f->logits && out.logits != nullptr && static_cast<int64_t>(r) < out.n_rows)
               ? out.logits + static_cast<int64_t>(r) * n_vocab_
               : nullptr;
  };
  for (Slot* sp : f->decode) {
    Slot& s = *sp;
    const size_t first = row, k = s.guesses.size();
    row += k + 1;
    const int64_t pos = static_cast<int64_t>(s.cached.size());
    s.cached.push_back(s.next);
    size_t accepted = 0;
    while (accepted < k && out.tokens[first + accepted] == s.guesses[accepted]) ++accepted;
    if (s.tuner != nullptr && k == 0 && o_.drafter->relative_cost() > 0) {
      // As Speculator::Step: a plain step's compute scaled to the draft's size.
      s.tuner->PredictDraft(o_.drafter->relative_cost() * StepCompute(out, now - f->started));
    }
    if (s.tuner != nullptr) s.tuner->Record(static_cast<int>(k), static_cast<int>(accepted), now - f->started, s.drafted, s.draft_seconds);
    if (k > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.speculation.rounds++;
      metrics_.speculation.guesses += static_cast<int64_t>(k);
      metrics_.speculation.accepted += static_cast<int64_t>(accepted);
      metrics_.speculation.tokens += static_cast<int64_t>(accepted + 1);
    }
    if (s.stream && !s.stream->cancelled()) {  // (a cancelled one is handled by the loop)
      for (size_t j = 0; j <= accepted && s.stream; ++j) {
        Deliver(s, out.tokens[first + j], logits_row(first + j));
        // An accepted guess is in the cache already; the last token is fed next step.
        if (j < accepted && s.stream) s.cached.push_back(s.guesses[j]);
      }
    }
    // Cells past what the slot lists (rejected guesses, or accepted ones after the request ended)
    // go with the next batch.
    if (k > 0 && static_cast<int64_t>(s.cached.size()) < pos + static_cast<int64_t>(k) + 1) {
      pending_truncate_.push_back({s.id, static_cast<int32_t>(s.cached.size())});
    }
    s.guesses.clear();
  }
  for (const InFlight::Chunk& c : f->prompts) {
    Slot& p = *c.slot;
    const size_t start = p.cached.size();
    p.cached.insert(p.cached.end(), p.req.prompt.begin() + start, p.req.prompt.begin() + start + c.rows);
    if (!c.done) continue;
    const size_t r = row++;
    if (!p.stream || p.stream->cancelled()) continue;
    Deliver(p, out.tokens[r], logits_row(r));
  }
  return Status::Ok();
}

void Scheduler::FailAll(const Status& st) {
  // Drain what is still in flight (its outputs are of no use now), fail every running request,
  // and drop every cached sequence: the stages' caches are in an unknown state.
  while (!in_flight_.empty()) {
    exec::RunOutput out;
    (void)ex_->Collect(in_flight_.front()->ticket, &out);
    in_flight_.pop_front();
  }
  for (auto& s : slots_) {
    s->in_flight = false;
    if (s->stream) {
      Event e;
      e.kind = Event::Kind::kError;
      e.error = st;
      s->stream->Push(std::move(e));
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.requests_failed++;
      metrics_.slots_busy--;
    }
    s->stream.reset();
    s->decoding = false;
    s->cached.clear();
    s->seen = 0;
  }
  pending_truncate_.clear();
  (void)ex_->Clear();
  Status health = ex_->Health();
  if (!health.ok()) {
    healthy_ = false;
    std::lock_guard<std::mutex> lock(mu_);
    down_reason_ = health.ToString();
  }
}

void Scheduler::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        if (stop_ || !queue_.empty() || !in_flight_.empty()) return true;
        for (auto& s : slots_) {
          if (s->stream) return true;
        }
        return false;
      });
      if (stop_) break;
    }
    // A failed executor: rebuild it before taking requests, or fail them with the reason.
    if (healthy_) {
      if (Status h = ex_->Health(); !h.ok()) {
        healthy_ = false;
        std::lock_guard<std::mutex> lock(mu_);
        down_reason_ = h.ToString();
      }
    }
    if (!healthy_) {
      Status why = Status::Unavailable(down_reason());
      if (o_.reopen) {
        {
          std::lock_guard<std::mutex> lock(ex_mu_);
          ex_.reset();
        }
        Result<std::unique_ptr<exec::Executor>> e = o_.reopen();
        if (e.ok()) {
          {
            std::lock_guard<std::mutex> lock(ex_mu_);
            ex_ = std::move(e).value();
          }
          for (auto& s : slots_) {
            s->cached.clear();
            s->seen = 0;
          }
          healthy_ = true;
          std::lock_guard<std::mutex> lock(mu_);
          down_reason_.clear();
        } else {
          why = Status::Unavailable(down_reason() + "; reconnecting failed: " + e.status().ToString());
        }
      }
      if (!healthy_) {
        std::deque<Pending> failed;
        {
          std::lock_guard<std::mutex> lock(mu_);
          failed.swap(queue_);
          metrics_.queue_depth = 0;
          metrics_.requests_failed += failed.size();
        }
        for (Pending& p : failed) {
          Event e;
          e.kind = Event::Kind::kError;
          e.error = why;
          p.stream->Push(std::move(e));
        }
        // Wait a little before the next attempt, unless asked to stop.
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stop_; });
        continue;
      }
    }
    // Idle with a request waiting: a pipeline that lost a worker takes it back if it is up again
    // (the executor keeps every slot's cache).
    bool idle = in_flight_.empty();
    for (auto& s : slots_) idle = idle && !s->stream;
    if (idle) {
      bool waiting = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        waiting = !queue_.empty();
      }
      if (waiting) (void)ex_->Rejoin();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      AssignSlots();
    }
    // Cancelled requests leave their slots (those in flight once their batch is back).
    for (auto& s : slots_) {
      if (s->stream && s->stream->cancelled() && !s->in_flight) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          metrics_.requests_cancelled++;
        }
        Event e;
        e.kind = Event::Kind::kError;
        e.error = Status::Cancelled("the request was cancelled");
        s->stream->Push(std::move(e));
        ResetSlot(*s);
      }
    }
    bool running = false;
    for (auto& s : slots_) running = running || (s->stream && s->decoding);
    for (int g = 0; g < depth_ && healthy_; ++g) {
      bool busy = false;
      for (const auto& f : in_flight_) busy = busy || f->group == g;
      if (!busy) SubmitGroup(g, running);
    }
    if (!in_flight_.empty()) (void)CollectOldest();
  }
  // Shutting down: whatever is running ends with an error.
  while (!in_flight_.empty()) {
    exec::RunOutput out;
    (void)ex_->Collect(in_flight_.front()->ticket, &out);
    in_flight_.pop_front();
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : slots_) {
    if (!s->stream) continue;
    Event e;
    e.kind = Event::Kind::kError;
    e.error = Status::Unavailable("the server is shutting down");
    s->stream->Push(std::move(e));
  }
  for (Pending& p : queue_) {
    Event e;
    e.kind = Event::Kind::kError;
    e.error = Status::Unavailable("the server is shutting down");
    p.stream->Push(std::move(e));
  }
}

}  // namespace tandem::engine
