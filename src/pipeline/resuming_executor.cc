#include "pipeline/resuming_executor.h"

#include <cstdio>

#include <algorithm>
#include <thread>

namespace tandem::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

ResumingExecutor::ResumingExecutor(std::unique_ptr<exec::Executor> first, ResumeOptions options,
                                   PipelineOpener open, WorkerProbe probe)
    : o_(std::move(options)),
      open_(std::move(open)),
      probe_(std::move(probe)),
      n_ctx_(first->n_ctx()),
      params_(first->params()),
      inner_(std::move(first)),
      current_(o_.workers) {}

ResumingExecutor::~ResumingExecutor() = default;

void ResumingExecutor::Log(const std::string& line) const {
  if (o_.log) {
    o_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

std::string ResumingExecutor::PlanLine() const {
  std::string s;
  for (const exec::StageInfo& st : stages()) {
    if (!s.empty()) s += ", ";
    s += st.node + " layers " + std::to_string(st.layer_begin) + "-" + std::to_string(st.layer_end - 1);
  }
  return s;
}

Result<uint64_t> ResumingExecutor::Submit(const model::Batch& batch, const exec::RunOptions& options) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return *dead_;
  }
  Entry e;
  e.ticket = ++next_ticket_;
  e.batch = batch;
  e.options = options;
  Result<uint64_t> r = inner_->Submit(batch, options);
  if (r.ok()) {
    e.inner = *r;
    e.inner_open = true;
    flight_.push_back(std::move(e));
    return flight_.back().ticket;
  }
  // A refused batch (its own fault) is not in flight; a failed pipeline is resumed with it.
  if (inner_->Health().ok()) return r.status();
  flight_.push_back(std::move(e));
  if (Status st = Resume(r.status()); !st.ok()) {
    flight_.pop_back();
    return st;
  }
  return flight_.back().ticket;
}

Status ResumingExecutor::Collect(uint64_t ticket, exec::RunOutput* out) {
  auto it = std::find_if(flight_.begin(), flight_.end(), [&](const Entry& e) { return e.ticket == ticket && !e.clear; });
  if (it == flight_.end() || it->collected) {
    return Status::InvalidArgument("no batch in flight with ticket " + std::to_string(ticket));
  }
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (dead_) return *dead_;
    }
    // Entries are found again by ticket: Resume may not move them, but stay safe.
    it = std::find_if(flight_.begin(), flight_.end(), [&](const Entry& e) { return e.ticket == ticket && !e.clear; });
    Status st = inner_->Collect(it->inner, out);
    it->inner_open = false;
    if (st.ok()) {
      it->collected = true;
      it->tokens = out->tokens;
      PopCollected();
      return st;
    }
    if (inner_->Health().ok()) {
      // The batch itself failed (a bad sampler, say): it is done, and its effect unknown only
      // to the stages' caches, which callers drop after an error.
      it->collected = true;
      PopCollected();
      return st;
    }
    TANDEM_RETURN_IF_ERROR(Resume(st));
  }
}

void ResumingExecutor::PopCollected() {
  while (!flight_.empty() && (flight_.front().clear || flight_.front().collected)) {
    Entry& e = flight_.front();
    if (e.inner_open) {  // submitted again after a resumption; its output was already given
      exec::RunOutput discard;
      (void)inner_->Collect(e.inner, &discard);
      e.inner_open = false;
    }
    Fold(e);
    flight_.pop_front();
  }
}

void ResumingExecutor::Fold(const Entry& e) {
  if (e.clear) {
    cache_.clear();
    samplers_.clear();
    log_.clear();
    log_rows_ = 0;
    log_exact_ = true;
    return;
  }
  if (log_exact_ && log_rows_ + e.batch.size() <= kMaxLogRows) {
    Entry kept;
    kept.batch = e.batch;
    std::fill(kept.batch.logits.begin(), kept.batch.logits.end(), 0);  // no head, no result
    kept.options.truncate = e.options.truncate;
    kept.options.samplers = e.options.samplers;
    log_.push_back(std::move(kept));
    log_rows_ += e.batch.size();
  } else if (log_exact_) {
    log_exact_ = false;
    log_.clear();
    log_rows_ = 0;
  }
  for (const exec::Truncation& t : e.options.truncate) {
    auto c = cache_.find(t.seq);
    if (c == cache_.end()) continue;
    if (t.from <= 0) {
      cache_.erase(c);
    } else if (static_cast<size_t>(t.from) < c->second.size()) {
      c->second.resize(static_cast<size_t>(t.from));
    }
  }
  for (const exec::SequenceSampler& s : e.options.samplers) {
    SamplerState& st = samplers_[s.seq];
    st.params = s.params;
    st.draws = s.params.skip_draws;
    st.params.skip_draws = 0;
    const size_t keep = static_cast<size_t>(std::max(s.params.repeat_last_n, 0));
    st.history.assign(s.history.end() - static_cast<ptrdiff_t>(std::min(keep, s.history.size())), s.history.end());
  }
  const model::Batch& b = e.batch;
  size_t sampled = 0;
  for (int64_t i = 0; i < b.size(); ++i) {
    std::vector<int32_t>& c = cache_[b.seq[i]];
    const size_t pos = static_cast<size_t>(b.pos[i]);
    if (pos >= c.size()) c.resize(pos + 1, -1);  // -1: a hole, which no caller leaves
    c[pos] = b.tokens[i];
    if (e.options.sample && b.logits[i] && sampled < e.tokens.size()) {
      auto s = samplers_.find(b.seq[i]);
      const int32_t guess = sampled < e.options.guesses.size() ? e.options.guesses[sampled] : -1;
      const int32_t tok = e.tokens[sampled++];
      if (s == samplers_.end() || tok < 0) continue;  // -1: not sampled (after a rejected guess)
      SamplerState& st = s->second;
      // Sampler::Verify draws once when it accepts a guess, twice when it rejects one.
      if (st.params.temperature > 0) st.draws += guess >= 0 && tok != guess ? 2 : 1;
      if (st.params.repeat_last_n > 0) {
        st.history.push_back(tok);
        const size_t keep = static_cast<size_t>(st.params.repeat_last_n);
        if (st.history.size() > keep) st.history.erase(st.history.begin(), st.history.end() - static_cast<ptrdiff_t>(keep));
      }
    }
  }
}

std::vector<std::string> ResumingExecutor::Candidates() const {
  std::vector<std::string> v;
  for (const std::string& w : o_.workers) {
    if (!down_.count(w)) v.push_back(w);
  }
  if (!down_.empty()) {
    for (const std::string& w : o_.standby) {
      if (!down_.count(w) && !Contains(v, w)) v.push_back(w);
    }
  }
  return v;
}

// Probes `w`, waiting while it is busy (a survivor frees the failed session once the old
// pipeline's connections close).
Status ResumingExecutor::ProbeWaiting(const std::string& w) {
  const auto w0 = Clock::now();
  Status st = probe_(w);
  while (!st.ok() && st.message().find("busy") != std::string::npos && Since(w0) * 1000 < o_.busy_wait_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    st = probe_(w);
  }
  return st;
}

Status ResumingExecutor::Resume(Status why) {
  const auto t0 = Clock::now();
  std::string blamed = inner_->failed_node();
  {
    std::lock_guard<std::mutex> lock(mu_);
    inner_.reset();  // ends the old sessions: the survivors become free
  }
  // Every failed attempt drops at least one node, so this ends.
  for (size_t attempt = 0; attempt <= o_.workers.size() + o_.standby.size() + 1; ++attempt) {
    // Which workers answer? (The node the pipeline blamed may be fine: a worker reports the
    // loss of its link to the next one, and a cut link is not a dead node.)
    std::vector<std::string> up, lost;
    auto probe = [&](const std::string& w) {
      if (ProbeWaiting(w).ok()) {
        up.push_back(w);
      } else {
        lost.push_back(w);
        down_.insert(w);
      }
    };
    for (const std::string& w : o_.workers) {
      if (!down_.count(w)) probe(w);
    }
    // The standbys join only when a worker is down.
    for (const std::string& w : o_.standby) {
      if (!down_.empty() && !down_.count(w) && !Contains(up, w)) probe(w);
    }
    std::string names;
    for (const std::string& w : lost) names += (names.empty() ? "" : ", ") + w;
    if (!names.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      failed_ += (failed_.empty() ? "" : ", ") + names;
    }
    if (attempt == 0) {
      Log("tandem: " + (names.empty() ? "lost the pipeline at " + (blamed.empty() ? "a worker" : "worker " + blamed)
                                      : "lost worker " + names) +
          " (" + why.message() + "); resuming over the nodes still up");
    } else if (!names.empty()) {
      Log("tandem: lost worker " + names + " too; resuming over the rest");
    }
    ResumeTimes times;
    Status st = Rebuild(up, /*quiet=*/true, &times);
    if (st.ok()) {
      times.open_s = Since(t0) - times.recompute_s;
      char line[256];
      std::snprintf(line, sizeof line, "tandem: resumed in %.2f s (new pipeline %.2f s, %lld tokens re-computed in %.2f s): ",
                    Since(t0), times.open_s, static_cast<long long>(times.recomputed_tokens), times.recompute_s);
      Log(line + PlanLine());
      std::lock_guard<std::mutex> lock(mu_);
      resumes_.push_back(times);
      return Status::Ok();
    }
    // Which node failed this attempt? The new pipeline names it, or the error does.
    std::string culprit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (inner_ && !inner_->Health().ok()) culprit = inner_->failed_node();
      inner_.reset();
    }
    for (const std::string& w : up) {
      if (culprit.empty() && st.message().find("worker " + w) != std::string::npos) culprit = w;
    }
    if (!culprit.empty() && !down_.count(culprit)) {
      why = st;
      down_.insert(culprit);
      std::lock_guard<std::mutex> lock(mu_);
      failed_ += (failed_.empty() ? "" : ", ") + culprit;
      continue;
    }
    // The nodes left cannot run the model (or the model cannot be opened): give up.
    std::lock_guard<std::mutex> lock(mu_);
    const std::string gone = failed_.empty() ? (blamed.empty() ? "the lost node" : blamed) : failed_;
    dead_ = Status(st.code(), "cannot resume without " + gone + ": " + st.message());
    return *dead_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  dead_ = Status::Unavailable("cannot resume: every node failed in turn (last: " + why.message() + ")");
  inner_.reset();
  return *dead_;
}

Status ResumingExecutor::Rebuild(const std::vector<std::string>& workers, bool quiet, ResumeTimes* t) {
  Result<std::unique_ptr<exec::Executor>> opened = open_(workers, quiet);
  if (!opened.ok()) return opened.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    inner_ = std::move(opened).value();
  }
  current_ = workers;
  exec::Executor& ex = *inner_;
  // Every sequence's cache, and every sampler where it stood.
  const auto t0 = Clock::now();
  std::vector<exec::SequenceSampler> states;
  for (const auto& [seq, st] : samplers_) {
    exec::SequenceSampler s{seq, st.params, st.history};
    s.params.skip_draws = st.draws;
    states.push_back(std::move(s));
  }
  t->recomputed_tokens = 0;
  if (log_exact_) {
    // The batches that built the caches, in their shapes, pipelined (no results are asked for);
    // the last one also leaves every sampler where it stood.
    std::vector<uint64_t> tickets;
    for (size_t i = 0; i < log_.size(); ++i) {
      const Entry& e = log_[i];
      exec::RunOptions ro;
      ro.truncate = e.options.truncate;
      ro.samplers = i + 1 == log_.size() ? states : e.options.samplers;
      TANDEM_ASSIGN_OR_RETURN(uint64_t ticket, ex.Submit(e.batch, ro));
      tickets.push_back(ticket);
      t->recomputed_tokens += e.batch.size();
    }
    exec::RunOutput out;
    for (uint64_t ticket : tickets) TANDEM_RETURN_IF_ERROR(ex.Collect(ticket, &out));
  } else {
    // Too long a history to keep: each sequence's tokens in one batch (the same cache as the one
    // built step by step as long as the kernels are batch-invariant; no test covers this case).
    model::Batch b;
    for (const auto& [seq, tokens] : cache_) {
      for (size_t p = 0; p < tokens.size(); ++p) {
        if (tokens[p] < 0) {
          return Status::Internal("sequence " + std::to_string(seq) + " has a position tandem never saw; its cache cannot be re-computed");
        }
        b.Add(tokens[p], static_cast<int32_t>(p), seq, false);
      }
    }
    t->recomputed_tokens = b.size();
    if (b.size() > 0) {  // (samplers of sequences with no cells left are configured again with their next prompt)
      exec::RunOptions ro;
      ro.samplers = states;
      exec::RunOutput out;
      TANDEM_RETURN_IF_ERROR(ex.Run(b, ro, &out));
    }
  }
  t->recompute_s = Since(t0);
  // Then the batches in flight, in order (those already collected too: the caches need them).
  for (Entry& e : flight_) {
    if (e.clear) {
      TANDEM_RETURN_IF_ERROR(ex.Clear());
      continue;
    }
    TANDEM_ASSIGN_OR_RETURN(e.inner, ex.Submit(e.batch, e.options));
    e.inner_open = true;
  }
  return Status::Ok();
}

Status ResumingExecutor::Clear() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return *dead_;
  }
  if (flight_.empty()) {
    cache_.clear();
    samplers_.clear();
  } else {
    Entry e;
    e.clear = true;
    flight_.push_back(std::move(e));
  }
  Status st = inner_->Clear();
  if (st.ok() || inner_->Health().ok()) return st;
  return Resume(st);
}

Status ResumingExecutor::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (dead_) return *dead_;
  return Status::Ok();
}

std::string ResumingExecutor::failed_node() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

int ResumingExecutor::pipeline_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inner_ ? inner_->pipeline_depth() : 1;
}

std::vector<exec::StageInfo> ResumingExecutor::stages() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!inner_) return {};
  return inner_->stages();
}

std::vector<ResumingExecutor::ResumeTimes> ResumingExecutor::resumes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resumes_;
}

Status ResumingExecutor::Rejoin() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_ || !inner_) return Status::Ok();
  }
  if (!flight_.empty()) return Status::InvalidArgument("Rejoin with batches in flight");
  if (down_.empty() && current_ == o_.workers) return Status::Ok();
  if (Since(last_rejoin_) < 1.0) return Status::Ok();
  last_rejoin_ = Clock::now();
  // Which lost workers answer again?
  std::vector<std::string> back;
  for (const std::string& w : down_) {
    if (probe_(w).ok()) back.push_back(w);
  }
  if (back.empty()) return Status::Ok();
  for (const std::string& w : back) down_.erase(w);
  // The current pipeline is healthy: end it cleanly, then build the new one over the original
  // workers that answer (standbys stay in only while an original worker is still down).
  const std::vector<std::string> previous = current_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inner_.reset();
  }
  std::vector<std::string> want;
  for (const std::string& w : Candidates()) {
    if (ProbeWaiting(w).ok()) {
      want.push_back(w);
    } else {
      down_.insert(w);
    }
  }
  const auto t0 = Clock::now();
  ResumeTimes times;
  Status st = Rebuild(want, /*quiet=*/true, &times);
  if (!st.ok()) {
    // Back to where it was (those nodes were running a moment ago).
    Status again = Rebuild(previous, true, &times);
    if (!again.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      dead_ = Status(again.code(), "lost the pipeline while re-joining workers: " + again.message());
      inner_.reset();
      return *dead_;
    }
    return st;
  }
  std::string names;
  for (const std::string& w : back) names += (names.empty() ? "" : ", ") + w;
  char line[160];
  std::snprintf(line, sizeof line, "tandem: worker %s is back; re-planned in %.2f s: ", names.c_str(), Since(t0));
  Log(line + PlanLine());
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_.clear();
  }
  return Status::Ok();
}

}  // namespace tandem::pipeline
