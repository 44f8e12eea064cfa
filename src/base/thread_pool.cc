#include "base/thread_pool.h"

#include <chrono>

#include "base/sys.h"

namespace tandem {
namespace {

// Polls pred() until it holds or `us` microseconds pass; returns pred(). Between polls the
// thread yields, so on a busy machine the core goes to whoever needs it.
template <typename Pred>
bool SpinFor(int us, Pred pred) {
  if (pred()) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < deadline) {
    for (int k = 0; k < 16; ++k) {
      if (pred()) return true;
    }
    std::this_thread::yield();
  }
  return pred();
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads < 1 ? 1 : n_threads), shares_(new Share[n_threads_]) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
  if (n_threads_ > 1) {
    cpus_ = sys::CallingThreadCpus();  // empty where threads are not placed by CPU (macOS)
    if (static_cast<int>(cpus_.size()) < n_threads_) cpus_.clear();  // oversubscribed: leave it
    others_.reserve(cpus_.size());
  }
}

void ThreadPool::KeepWorkersOffCallerCpu() {
  if (cpus_.empty()) return;
  const int cpu = sys::CurrentCpu();
  if (cpu < 0 || cpu == caller_cpu_) return;
  caller_cpu_ = cpu;
  others_.clear();  // capacity reserved at construction: a job never allocates here
  for (int c : cpus_) {
    if (c != cpu) others_.push_back(c);
  }
  if (others_.empty()) return;
  for (std::thread& t : workers_) sys::SetThreadCpus(t, others_);
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunJob(Job job) {
  if (n_threads_ == 1) {
    job.call(job.fn, 0, 1);
    return;
  }
  KeepWorkersOffCallerCpu();
  job_ = job;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);  // publishes job_ and pending_
  generation_.notify_all();
  job.call(job.fn, 0, n_threads_);
  const int spin = spin_us_.load(std::memory_order_relaxed);
  if (!SpinFor(spin * 4, [&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    for (int p = pending_.load(std::memory_order_acquire); p != 0;
         p = pending_.load(std::memory_order_acquire)) {
      pending_.wait(p, std::memory_order_acquire);
    }
  }
  job_ = Job{nullptr, nullptr};
}

void ThreadPool::WorkerLoop(int index) {
  sys::PreferPerformanceCores();
  uint32_t seen = 0;  // the generation before any job: a worker that starts late still runs job 1
  while (true) {
    const int spin = spin_us_.load(std::memory_order_relaxed);
    if (!SpinFor(spin, [&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      generation_.wait(seen, std::memory_order_acquire);  // sleeps; no CPU while idle
    }
    const uint32_t now = generation_.load(std::memory_order_acquire);
    if (now == seen) continue;  // spurious wake-up
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    job_.call(job_.fn, index, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

bool ThreadPool::Take(int share, bool owner, int64_t* b, int64_t* e) {
  std::atomic<uint64_t>& a = shares_[share].span;
  uint64_t v = a.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t front = static_cast<int64_t>(v & 0xFFFFFFFFu), back = static_cast<int64_t>(v >> 32);
    if (front >= back) return false;
    const int64_t part = (back - front) / (owner ? 4 : 2);
    const int64_t take = part > 1 ? part : 1;
    *b = owner ? front : back - take;
    *e = *b + take;
    if (a.compare_exchange_weak(v, owner ? Pack(*e, back) : Pack(front, *b), std::memory_order_relaxed)) {
      return true;
    }
  }
}

Range SplitRange(int64_t n, int index, int count, int64_t granule) {
  if (granule < 1) granule = 1;
  const int64_t units = (n + granule - 1) / granule;
  const int64_t per = units / count, extra = units % count;
  const int64_t ub = index * per + (index < extra ? index : extra);
  const int64_t ue = ub + per + (index < extra ? 1 : 0);
  Range r{ub * granule, ue * granule};
  if (r.begin > n) r.begin = n;
  if (r.end > n) r.end = n;
  return r;
}

}  // namespace tandem
