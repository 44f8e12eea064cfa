// Scheduler: continuous batching of many requests over one model (what `tandem serve` runs on).
//
// The model's KV cache is divided into n_slots slots of n_ctx / n_slots cells (llama-server's
// -np); slot i is sequence i. A request takes a free slot, its prompt is computed in chunks, and
// then it decodes one token per step together with every other decoding slot: one batch per
// step holds one row per decoding sequence plus prompt chunks up to a budget, so a new request
// joins the running batch at the next step and running streams keep flowing while it is read.
// (Several short prompts that arrive together share one step's prompt budget.)
//
// Pipelines: the slots are dealt round-robin into as many groups as the executor has stages,
// and each group has its own batch in flight (Executor::Submit/Collect): while the last worker
// computes group A's step, the one before computes group B's and the main node group C's.
//
// Prompt caching: a slot keeps the tokens whose keys and values it holds after its request ends.
// A new request takes the free slot whose tokens share the longest prefix with its prompt (a
// chat's next turn finds its previous turn) and computes only the rest; the truncation of the
// rest travels with the first chunk. A cancelled request's cells are freed with the next batch.
//
// Failures: a pipeline that loses a worker resumes over the rest by itself (pipeline/
// resuming_executor.h): requests in flight go on, and while the scheduler is idle with a request
// waiting it asks the executor to take back workers that are up again (Executor::Rejoin). A step
// that fails anyway (resumption impossible, or --no-resume) fails the requests in that batch (their streams get an error) and
// every other running request, since the pipeline's state is then unknown; the cache is cleared.
// If the executor cannot run any more (a worker died), `reopen` (when given) builds a new one on
// the next request; until it succeeds, requests fail with the reason and healthy() is false.
//
// Thread safety: Submit, Cancel (through the Stream), metrics() and healthy() may be called from
// any thread. Every executor call runs on the scheduler's own thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/speculative.h"
#include "exec/executor.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace tandem::engine {

struct SchedulerOptions {
  int n_slots = 4;             // sequences decoded together (-np)
  int64_t n_ctx = 4096;        // cells in all: each slot has n_ctx / n_slots
  int64_t prompt_chunk = 128;  // prompt tokens per step while other sequences decode
  int64_t prompt_chunk_alone = 512;  // ... and when nothing else is running
  int max_queue = 64;          // requests waiting for a slot; more are refused (Unavailable)
  // Groups of slots in flight at once (0: one per pipeline stage). Fewer groups batch more
  // sequences per step: better when the stages share a machine's cores (a one-machine test),
  // worse over real links, where one group per stage keeps every machine busy.
  int groups = 0;
  // Builds a new executor after the current one failed for good (a worker died); null: none.
  std::function<Result<std::unique_ptr<exec::Executor>>()> reopen;
  // Speculative decoding (engine/speculative.h): each decoding slot's row is followed by the
  // drafter's guesses, verified in the same step; how many per slot is tuned per slot. The
  // drafter (null: none) must outlive the scheduler; only the scheduler's thread uses it.
  Drafter* drafter = nullptr;
  int draft_min = 0, draft_max = 16;
};

struct Request {
  std::vector<int32_t> prompt;  // token ids, not empty
  int n_predict = -1;           // -1: until an end-of-generation token or the slot is full
  sampling::SamplerParams sampling;
  std::vector<std::string> stop;  // stop strings (not part of the text)
  bool ignore_eos = false;
  int top_logprobs = -1;  // -1: no log-probabilities; 0..20: the chosen token's and this many others'
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // the most probable tokens, most probable first
};

struct Event {
  enum class Kind { kText, kDone, kError };
  Kind kind = Kind::kText;
  std::string text;                    // kText: new text (whole UTF-8 characters, no stop string)
  std::vector<TokenLogprob> logprobs;  // kText, when asked: the tokens behind `text`
  // kDone:
  std::string finish_reason;  // "stop" (end of generation or a stop string) or "length"
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double time_to_first_token_ms = 0, generate_ms = 0;
  Status error;  // kError
};

// The events of one request, in order: kText..., then one kDone or one kError.
class Stream {
 public:
  // Waits up to timeout_ms for the next event; false if none came in that time.
  bool Next(Event* e, int timeout_ms);
  // Stops the request; its slot's cells are freed with the next batch. Safe to call any time.
  void Cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  friend class Scheduler;
  void Push(Event e);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerMetrics {
  uint64_t requests = 0, requests_failed = 0, requests_cancelled = 0;
  uint64_t prompt_tokens = 0, prompt_tokens_cached = 0, generated_tokens = 0;
  uint64_t steps = 0;
  double time_to_first_token_ms_sum = 0;
  uint64_t time_to_first_token_count = 0;
  double generate_seconds = 0;  // wall time during which at least one sequence decoded
  int queue_depth = 0, slots_busy = 0, n_slots = 0;
  std::vector<double> stage_ms_sum;  // per stage, compute milliseconds over every step
  SpeculationStats speculation;      // with a drafter
};

class Scheduler {
 public:
  // `executor` runs the model (this machine alone or a pipeline); `tokenizer` detokenizes;
  // `is_end` says which tokens end a generation. All must outlive the scheduler.
  Scheduler(std::unique_ptr<exec::Executor> executor, const tokenizer::Tokenizer& tokenizer,
            std::function<bool(int32_t)> is_end, const SchedulerOptions& options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. InvalidArgument for a bad request (an empty prompt, a prompt that does
  // not fit a slot: both numbers given, bad sampling parameters), Unavailable when the queue is
  // full. The stream then delivers its events.
  Result<std::shared_ptr<Stream>> Submit(Request request);

  int64_t slot_ctx() const { return slot_ctx_; }
  int n_slots() const { return static_cast<int>(slots_.size()); }
  SchedulerMetrics metrics() const;
  // False while the executor has failed (a worker died) and no new one could be built.
  bool healthy() const;
  // The executor's stages now (a pipeline that lost or took back a worker has re-planned).
  std::vector<exec::StageInfo> stages() const;
  // The reason the executor is down (empty when healthy).
  std::string down_reason() const;

 private:
  struct Slot;
  struct InFlight;

  void Loop();
  bool AssignSlots();                  // under mu_
  void StartRequest(Slot& s);
  void Draft(Slot& s);  // the slot's guesses for its next step (none without a drafter)
  bool SubmitGroup(int group, bool others_running);
  Status CollectOldest();
  void Deliver(Slot& s, int32_t token, const float* logits_row);
  void Finish(Slot& s, const std::string& reason);
  void FailAll(const Status& st);
  void ResetSlot(Slot& s);

  std::unique_ptr<exec::Executor> ex_;  // replaced only by the scheduler thread, under ex_mu_
  mutable std::mutex ex_mu_;
  const tokenizer::Tokenizer& tok_;
  std::function<bool(int32_t)> is_end_;
  SchedulerOptions o_;
  int64_t slot_ctx_;
  int64_t n_vocab_;
  model::ModelParams params_;  // the model's (a reopened executor runs the same model)
  int depth_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Pending {
    Request request;
    std::shared_ptr<Stream> stream;
    double queued_at = 0;
  };
  std::deque<Pending> queue_;
  bool stop_ = false;
  std::atomic<bool> healthy_{true};
  std::string down_reason_;
  SchedulerMetrics metrics_;

  // Scheduler thread only.
  std::vector<std::unique_ptr<Slot>> slots_;
  std::deque<std::unique_ptr<InFlight>> in_flight_;
  std::vector<exec::Truncation> pending_truncate_;
  uint64_t clock_ = 0;  // for least-recently-used slot choice
  std::thread thread_;
};

}  // namespace tandem::engine
