// Scheduler: requests batched together give exactly what each gives alone (greedy and seeded),
// on one node and through a pipeline of two in-process workers; a chat's next turn reuses its
// slot's cache; cancellation, stop strings, log-probabilities and the limits.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "engine/stop_strings.h"
#include "exec/forwarding_executor.h"
#include "pipeline/test_worker.h"

namespace tandem::engine {
namespace {

std::string ModelPath() {
  return (std::filesystem::path(TANDEM_SHARED_DIR) / "reference/models/stories260K.gguf").string();
}

std::unique_ptr<Engine> OpenEngine(const std::vector<std::string>& workers = {}, int64_t n_ctx = 512,
                                   std::function<void(const std::string&)> log = {},
                                   const SpeculationOptions& spec = {}, const std::string& model = ModelPath()) {
  EngineOptions o;
  o.speculation = spec;
  o.model_path = model;
  o.exec.threads = 1;
  o.exec.n_ctx = n_ctx;
  o.exec.workers = workers;
  o.exec.log = log ? log : [](const std::string&) {};
  Result<std::unique_ptr<Engine>> e = Engine::Open(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// An executor whose first Submit waits until Open(): requests submitted meanwhile are all
// queued when the scheduler takes its second step, however the threads are scheduled.
class GatedExecutor : public exec::ForwardingExecutor {
 public:
  using ForwardingExecutor::ForwardingExecutor;
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  Result<uint64_t> Submit(const model::Batch& b, const exec::RunOptions& o) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
    lock.unlock();
    return inner().Submit(b, o);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A scheduler over the engine's executor (the engine must outlive it); with `gate`, over the
// executor behind a gate the caller opens (*gate, owned by the scheduler).
std::unique_ptr<Scheduler> MakeScheduler(Engine& e, const SchedulerOptions& so, GatedExecutor** gate = nullptr) {
  std::unique_ptr<exec::Executor> ex = e.TakeExecutor();
  if (gate != nullptr) {
    auto g = std::make_unique<GatedExecutor>(std::move(ex));
    *gate = g.get();
    ex = std::move(g);
  }
  return std::make_unique<Scheduler>(std::move(ex), e.tokenizer(),
                                     [&e](int32_t t) { return e.IsEndOfGeneration(t); }, so);
}

struct Outcome {
  std::string text;
  Event done;
  bool failed = false;
  Status error;
  std::vector<TokenLogprob> logprobs;
};

// `on_third_text`, if given, runs once when the third piece of text arrives.
Outcome Drain(Stream& s, int cancel_after_texts = -1, const std::function<void()>& on_third_text = {}) {
  Outcome o;
  int texts = 0;
  for (;;) {
    Event e;
    if (!s.Next(&e, 20000)) {
      o.failed = true;
      o.error = Status::Internal("no event for 20 s");
      return o;
    }
    if (e.kind == Event::Kind::kText) {
      o.text += e.text;
      o.logprobs.insert(o.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      if (++texts == cancel_after_texts) s.Cancel();
      if (texts == 3 && on_third_text) on_third_text();
      continue;
    }
    if (e.kind == Event::Kind::kError) {
      o.failed = true;
      o.error = e.error;
      return o;
    }
    o.done = e;
    return o;
  }
}

Request MakeRequest(const Engine& e, const std::string& prompt, int n_predict, float temperature = 0,
                    uint64_t seed = 1) {
  Request r;
  Result<std::vector<int32_t>> t = e.tokenizer().Encode(prompt, {});
  EXPECT_TRUE(t.ok());
  r.prompt = *t;
  r.n_predict = n_predict;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

const std::vector<std::string> kPrompts = {
    "Once upon a time, there was a little girl",
    "The dog ran",
    "Tom and Sue went to the park. They saw a big tree and",
    "One day, a bird",
    "Lily wanted to play with her ball, but",
    "The sun was hot",
    "There was a boy who liked to eat apples. Every day he",
    "Mom said",
};

// What Engine::Generate (the `run` command's path) writes for request i.
std::vector<std::string> GenerateAlone(float temperature, float repeat_penalty, int n_base = 24) {
  std::unique_ptr<Engine> e = OpenEngine();
  std::vector<std::string> want;
  if (e == nullptr) return want;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    GenerateOptions g;
    g.n_predict = n_base + static_cast<int>(i);
    g.sampling.temperature = temperature;
    g.sampling.repeat_penalty = repeat_penalty;
    g.sampling.seed = 100 + i;
    g.parse_special = false;
    std::string text;
    Result<GenerateStats> st = e->Generate(kPrompts[i], g, [&](std::string_view t) {
      text += t;
      return true;
    });
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    want.push_back(text);
  }
  return want;
}

// Every request of kPrompts submitted at once to a scheduler of `n_slots` slots; the texts.
std::vector<std::string> RunTogether(const std::vector<std::string>& workers, int n_slots, float temperature,
                                     float repeat_penalty, SchedulerMetrics* metrics, int groups = 0,
                                     const SpeculationOptions& spec = {}) {
  std::vector<std::string> texts;
  std::unique_ptr<Engine> e = OpenEngine(workers, 1024, {}, spec);
  if (e == nullptr) return texts;
  SchedulerOptions so;
  so.drafter = e->drafter();
  so.n_slots = n_slots;  // fewer slots than requests: the others wait for a slot
  so.n_ctx = 1024;
  so.prompt_chunk = 5;  // prompts read over several steps, between decode steps
  so.groups = groups;
  GatedExecutor* gate = nullptr;
  std::unique_ptr<Scheduler> sched_owner = MakeScheduler(*e, so, &gate);
  Scheduler& sched = *sched_owner;
  std::vector<std::shared_ptr<Stream>> streams;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    Request r = MakeRequest(*e, kPrompts[i], 24 + static_cast<int>(i), temperature, 100 + i);
    r.sampling.repeat_penalty = repeat_penalty;
    Result<std::shared_ptr<Stream>> s = sched.Submit(r);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) {
      gate->Open();  // else the scheduler's thread waits at the gate for ever
      return texts;
    }
    streams.push_back(*s);
  }
  gate->Open();  // every request is queued: the scheduler's steps from now on can take them all
  std::vector<Outcome> got(streams.size());
  std::vector<std::thread> readers;
  for (size_t i = 0; i < streams.size(); ++i) readers.emplace_back([&, i] { got[i] = Drain(*streams[i]); });
  for (std::thread& t : readers) t.join();
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_FALSE(got[i].failed) << got[i].error.ToString();
    EXPECT_GT(got[i].done.completion_tokens, 0);
    texts.push_back(got[i].text);
  }
  *metrics = sched.metrics();
  return texts;
}

TEST(SchedulerTest, EightConcurrentGreedyRequestsEqualEachAlone) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  const std::vector<std::string> want = GenerateAlone(0, 1.0f);
  SchedulerMetrics m;
  EXPECT_EQ(RunTogether({}, 8, 0, 1.0f, &m), want);
  EXPECT_EQ(m.requests, kPrompts.size());
  // Fewer steps than tokens: the sequences really decoded together.
  EXPECT_LT(m.steps, m.generated_tokens / 3);
  EXPECT_EQ(RunTogether({}, 3, 0, 1.0f, &m), want);  // with a queue
}

// Seeded sampling with penalties gives what the `run` path gives (the seed, the history and the
// penalties reach the sampler), in one slot and batched in 8: a row's logits do not depend on
// the batch it is in (the kernels are batch-invariant), so not even a draw that lands within a
// rounding error of a boundary moves.
TEST(SchedulerTest, SeededSamplingInASlotEqualsTheRunPath) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  const std::vector<std::string> want = GenerateAlone(0.9f, 1.3f);
  SchedulerMetrics m;
  EXPECT_EQ(RunTogether({}, 1, 0.9f, 1.3f, &m), want);
  EXPECT_EQ(RunTogether({}, 8, 0.9f, 1.3f, &m), want);
}

// Speculation in the server's batches: each slot's guesses verified in the shared step give
// each request's greedy text alone, with prompt lookup and with the model as its own draft, on
// one node (8 and 3 slots) and through two workers.
TEST(SchedulerTest, SpeculativeRequestsEqualEachAlone) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  const std::vector<std::string> want = GenerateAlone(0, 1.0f);
  SpeculationOptions lookup;
  lookup.lookup = true;
  SpeculationOptions self;
  self.draft_model = ModelPath();
  for (const SpeculationOptions& spec : {lookup, self}) {
    SCOPED_TRACE(spec.lookup ? "lookup" : "draft model");
    SchedulerMetrics m;
    EXPECT_EQ(RunTogether({}, 8, 0, 1.0f, &m, 0, spec), want);
    EXPECT_GT(m.speculation.rounds, 0);
    EXPECT_GT(m.speculation.accepted, 0);
    if (!spec.lookup) {
      EXPECT_EQ(m.speculation.accepted, m.speculation.guesses);
    }
    EXPECT_EQ(RunTogether({}, 3, 0, 1.0f, &m, 0, spec), want);
  }
  pipeline::TestWorker w1, w2;
  SchedulerMetrics m;
  EXPECT_EQ(RunTogether({w1.addr(), w2.addr()}, 8, 0, 1.0f, &m, 0, lookup), want);
  EXPECT_GT(m.speculation.rounds, 0);
}

TEST(SchedulerTest, ConcurrentRequestsThroughTwoWorkersEqualEachAlone) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  const std::vector<std::string> want = GenerateAlone(0, 1.0f);
  pipeline::TestWorker w1, w2;
  SchedulerMetrics m;
  EXPECT_EQ(RunTogether({w1.addr(), w2.addr()}, 6, 0, 1.0f, &m), want);
  EXPECT_LT(m.steps, m.generated_tokens);
  ASSERT_EQ(m.stage_ms_sum.size(), 3u);  // every stage reported its time
  // One group: every sequence in one batch per step, one batch in flight.
  SchedulerMetrics one;
  EXPECT_EQ(RunTogether({w1.addr(), w2.addr()}, 6, 0, 1.0f, &one, 1), want);
  EXPECT_LT(one.steps, m.steps);
}

// A worker that dies while eight requests are being served: every request goes on (the pipeline
// resumes over the main node and the other worker) and gets exactly its text alone, seeded
// sampling included.
TEST(SchedulerTest, RequestsInFlightGoOnWhenAWorkerDies) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  const std::vector<std::string> want = GenerateAlone(0.9f, 1.1f, 80);
  pipeline::TestWorker w1;
  auto w2 = std::make_unique<pipeline::TestWorker>();
  std::mutex log_mu;
  std::string log;
  std::unique_ptr<Engine> e = OpenEngine({w1.addr(), w2->addr()}, 1024, [&](const std::string& l) {
    std::lock_guard<std::mutex> lock(log_mu);
    log += l + "\n";
  });
  ASSERT_NE(e, nullptr);
  SchedulerOptions so;
  so.n_slots = 4;  // 256 cells each
  so.n_ctx = 1024;
  so.prompt_chunk = 5;
  std::unique_ptr<Scheduler> sched = MakeScheduler(*e, so);
  std::vector<std::shared_ptr<Stream>> streams;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    Request r = MakeRequest(*e, kPrompts[i], 80 + static_cast<int>(i), 0.9f, 100 + i);
    r.sampling.repeat_penalty = 1.1f;
    Result<std::shared_ptr<Stream>> s = sched->Submit(r);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    streams.push_back(*s);
  }
  // The second worker stops after the first request's third piece of text.
  std::vector<Outcome> got(streams.size());
  std::vector<std::thread> readers;
  readers.emplace_back([&] { got[0] = Drain(*streams[0], -1, [&] { w2.reset(); }); });
  for (size_t i = 1; i < streams.size(); ++i) readers.emplace_back([&, i] { got[i] = Drain(*streams[i]); });
  for (std::thread& t : readers) t.join();
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_FALSE(got[i].failed) << i << ": " << got[i].error.ToString();
    EXPECT_EQ(got[i].text, want[i]) << i;
  }
  std::lock_guard<std::mutex> lock(log_mu);
  EXPECT_NE(log.find("lost worker"), std::string::npos) << log;
  EXPECT_NE(log.find("resumed in"), std::string::npos) << log;
  EXPECT_TRUE(sched->healthy());
}

TEST(SchedulerTest, ANextTurnReusesItsSlotsCache) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  std::unique_ptr<Engine> e = OpenEngine();
  ASSERT_NE(e, nullptr);
  SchedulerOptions so;
  so.n_slots = 3;  // at the second turn the least recently used slot is a never-used one
  so.n_ctx = 512;
  std::unique_ptr<Scheduler> sched_owner = MakeScheduler(*e, so);
  Scheduler& sched = *sched_owner;
  const std::string turn1 = "Once upon a time, there was a cat";
  Result<std::shared_ptr<Stream>> s1 = sched.Submit(MakeRequest(*e, turn1, 16));
  ASSERT_TRUE(s1.ok());
  Outcome o1 = Drain(**s1);
  ASSERT_FALSE(o1.failed);
  EXPECT_EQ(o1.done.cached_tokens, 0);
  // Another conversation in between takes another slot.
  Result<std::shared_ptr<Stream>> other = sched.Submit(MakeRequest(*e, "The dog ran", 8));
  ASSERT_TRUE(other.ok());
  ASSERT_FALSE(Drain(**other).failed);
  const std::string turn2 = turn1 + o1.text + ". The cat said";
  Request r2 = MakeRequest(*e, turn2, 16);
  Result<std::shared_ptr<Stream>> s2 = sched.Submit(r2);
  ASSERT_TRUE(s2.ok());
  Outcome o2 = Drain(**s2);
  ASSERT_FALSE(o2.failed);
  EXPECT_GE(o2.done.cached_tokens, o1.done.prompt_tokens);
  EXPECT_LT(o2.done.prompt_tokens - o2.done.cached_tokens, 8) << "computed more than the new turn";
  // The same as a scheduler computing everything from nothing.
  std::unique_ptr<Engine> fresh_engine = OpenEngine();
  std::unique_ptr<Scheduler> fresh_owner = MakeScheduler(*fresh_engine, so);
  Scheduler& fresh = *fresh_owner;
  Result<std::shared_ptr<Stream>> f = fresh.Submit(MakeRequest(*fresh_engine, turn2, 16));
  ASSERT_TRUE(f.ok());
  Outcome of = Drain(**f);
  EXPECT_EQ(of.done.cached_tokens, 0);
  EXPECT_EQ(of.text, o2.text);
}

// tiny-gemma3's window layers keep 16 + 32 positions behind a sequence's latest batch
// (model/kv_cache.h). A request that shares only the beginning of a slot's tokens, further back
// than that, computes its prompt from position 0 (reusing it would need dropped cells: the stage
// refuses, and the request would fail); one within the margin reuses the slot. Each gives the
// text of a fresh scheduler.
TEST(SchedulerTest, ASlotIsReusedOnlyAsFarBackAsItsSlidingWindowReaches) {
  const std::string gemma = (std::filesystem::path(TANDEM_SHARED_DIR) / "reference/models/tiny-gemma3-q4_k_m.gguf").string();
  if (!std::filesystem::exists(gemma)) GTEST_SKIP() << "no shared reference model";
  std::unique_ptr<Engine> e = OpenEngine({}, 512, {}, {}, gemma);
  ASSERT_NE(e, nullptr);
  SchedulerOptions so;
  so.n_slots = 1;
  so.n_ctx = 512;
  std::unique_ptr<Scheduler> sched = MakeScheduler(*e, so);
  const int64_t V = e->model().params().n_vocab;
  auto ids = [&](int n, int salt) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(static_cast<int32_t>((i * 131 + salt * 977 + 5) % V));
    return v;
  };
  auto request = [&](std::vector<int32_t> prompt) {
    Request r;
    r.prompt = std::move(prompt);
    r.n_predict = 6;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    return r;
  };
  auto run = [&](Scheduler& s, const Request& r) {
    Result<std::shared_ptr<Stream>> st = s.Submit(r);
    EXPECT_TRUE(st.ok());
    return st.ok() ? Drain(**st) : Outcome{};
  };
  const std::vector<int32_t> a = ids(100, 1);
  std::vector<int32_t> b(a.begin(), a.begin() + 40);  // 40 shared: 66 behind the slot's 106
  for (int32_t t : ids(20, 2)) b.push_back(t);
  std::vector<int32_t> c(b.begin(), b.begin() + 55);  // 55 shared: 11 behind the slot's 66
  for (int32_t t : ids(10, 3)) c.push_back(t);
  ASSERT_FALSE(run(*sched, request(a)).failed);
  const Outcome ob = run(*sched, request(b));
  ASSERT_FALSE(ob.failed) << ob.error.ToString();
  EXPECT_EQ(ob.done.cached_tokens, 0);
  const Outcome oc = run(*sched, request(c));
  ASSERT_FALSE(oc.failed) << oc.error.ToString();
  EXPECT_EQ(oc.done.cached_tokens, 55);
  std::unique_ptr<Engine> fresh_engine = OpenEngine({}, 512, {}, {}, gemma);
  for (const auto& [prompt, got] : {std::pair{b, ob}, std::pair{c, oc}}) {
    std::unique_ptr<Scheduler> fresh = MakeScheduler(*fresh_engine, so);
    const Outcome want = run(*fresh, request(prompt));
    ASSERT_FALSE(want.failed);
    EXPECT_EQ(want.done.cached_tokens, 0);
    EXPECT_EQ(got.text, want.text);
    fresh_engine = OpenEngine({}, 512, {}, {}, gemma);  // TakeExecutor left it without one
  }
}

TEST(SchedulerTest, ACancelledRequestLeavesTheOthersUnchanged) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  std::unique_ptr<Engine> e = OpenEngine();
  ASSERT_NE(e, nullptr);
  SchedulerOptions so;
  so.n_slots = 2;
  so.n_ctx = 512;
  std::unique_ptr<Scheduler> sched_owner = MakeScheduler(*e, so);
  Scheduler& sched = *sched_owner;
  Result<std::shared_ptr<Stream>> a = sched.Submit(MakeRequest(*e, kPrompts[0], 40));
  ASSERT_TRUE(a.ok());
  const Outcome alone = Drain(**a);
  ASSERT_FALSE(alone.failed);
  // Again, now beside a request that is cancelled after a few pieces of text; then a third
  // takes the freed slot.
  Result<std::shared_ptr<Stream>> a2 = sched.Submit(MakeRequest(*e, kPrompts[0] + " ", 40));
  Result<std::shared_ptr<Stream>> b = sched.Submit(MakeRequest(*e, kPrompts[2], 200));
  ASSERT_TRUE(a2.ok() && b.ok());
  Outcome ob;
  std::thread tb([&] { ob = Drain(**b, 3); });
  Outcome oa = Drain(**a2);
  tb.join();
  EXPECT_FALSE(oa.failed);
  // The cancelled stream ends without a Done (or with one, if it finished first): never hangs.
  EXPECT_LT(ob.done.completion_tokens, 200);
  Result<std::shared_ptr<Stream>> c = sched.Submit(MakeRequest(*e, kPrompts[0], 40));
  ASSERT_TRUE(c.ok());
  Outcome oc = Drain(**c);
  ASSERT_FALSE(oc.failed);
  EXPECT_EQ(oc.text, alone.text);
  EXPECT_EQ(sched.metrics().requests_cancelled, 1u);
}

TEST(SchedulerTest, StopStringsLogprobsAndLimits) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "no shared reference model";
  std::unique_ptr<Engine> e = OpenEngine();
  ASSERT_NE(e, nullptr);
  SchedulerOptions so;
  so.n_slots = 2;
  so.n_ctx = 128;
  so.max_queue = 2;
  std::unique_ptr<Scheduler> sched_owner = MakeScheduler(*e, so);
  Scheduler& sched = *sched_owner;
  EXPECT_EQ(sched.slot_ctx(), 64);
  Request r = MakeRequest(*e, kPrompts[0], 30);
  Result<std::shared_ptr<Stream>> s = sched.Submit(r);
  ASSERT_TRUE(s.ok());
  const Outcome full = Drain(**s);
  ASSERT_FALSE(full.failed);
  ASSERT_GT(full.text.size(), 12u);
  // A stop string taken from the middle of the text: the text ends just before it.
  const std::string stop = full.text.substr(8, 4);
  r.stop = {stop};
  r.top_logprobs = 3;
  s = sched.Submit(r);
  ASSERT_TRUE(s.ok());
  Outcome o = Drain(**s);
  ASSERT_FALSE(o.failed);
  EXPECT_EQ(o.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(o.done.finish_reason, "stop");
  ASSERT_FALSE(o.logprobs.empty());
  for (const TokenLogprob& t : o.logprobs) {
    EXPECT_LE(t.logprob, 0.0f);
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_EQ(t.top[0].first, t.token);  // greedy: the chosen token is the most probable
    EXPECT_FLOAT_EQ(t.top[0].second, t.logprob);
    EXPECT_GE(t.top[0].second, t.top[1].second);
  }
  EXPECT_EQ(full.done.finish_reason, "length");
  EXPECT_EQ(full.done.completion_tokens, 30);

  // A prompt that does not fit a slot: both numbers in the message.
  Request big;
  big.prompt.assign(64, 1);
  Result<std::shared_ptr<Stream>> too_long = sched.Submit(big);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), Code::kOutOfRange);
  EXPECT_NE(too_long.status().message().find("64"), std::string::npos) << too_long.status().ToString();
  // A generation that reaches the end of its slot stops with "length".
  Request fill = MakeRequest(*e, kPrompts[0], -1);
  fill.ignore_eos = true;
  s = sched.Submit(fill);
  ASSERT_TRUE(s.ok());
  o = Drain(**s);
  ASSERT_FALSE(o.failed);
  EXPECT_EQ(o.done.finish_reason, "length");
  EXPECT_EQ(o.done.prompt_tokens + o.done.completion_tokens, 64);
  // Bad requests.
  EXPECT_FALSE(sched.Submit(Request{}).ok());
  Request bad = r;
  bad.prompt = {1, 1 << 30};
  EXPECT_FALSE(sched.Submit(bad).ok());
  bad = r;
  bad.sampling.top_p = 2;
  EXPECT_FALSE(sched.Submit(bad).ok());
}

TEST(StopStringsTest, HoldsBackWhatCouldStartAStopString) {
  StopStrings s({"</end>", "xyz"});
  bool stopped = false;
  EXPECT_EQ(s.Push("hello <", &stopped), "hello ");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(s.Push("/e", &stopped), "");
  EXPECT_EQ(s.Push("x", &stopped), "</e");  // no longer a start of "</end>", but "x" may start "xyz"
  EXPECT_FALSE(stopped);
  EXPECT_EQ(s.Push("y", &stopped), "");
  EXPECT_EQ(s.Push("zzz", &stopped), "");
  EXPECT_TRUE(stopped);
  StopStrings t({"ab"});
  EXPECT_EQ(t.Push("xa", &stopped), "x");
  EXPECT_EQ(t.Flush(), "a");
  StopStrings none({""});
  EXPECT_EQ(none.Push("abc", &stopped), "abc");
  EXPECT_FALSE(stopped);
}

}  // namespace
}  // namespace tandem::engine
