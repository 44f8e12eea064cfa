// ThreadPool: runs one function on N threads (the caller is thread 0) and waits for all of them.
//
// Built for compute kernels called back to back (a decode step is dozens of matrix-vector
// products): after finishing a job a worker spins briefly, so the next job starts within
// microseconds, then sleeps on a futex (std::atomic::wait). An idle pool uses no CPU, so a stage
// waiting for the network does not steal a core from the stage that is computing.
//
// Placement (Linux): when the caller runs on a CPU that it did not run on at the previous job, the
// workers are told to keep off that CPU (an affinity mask of every other allowed CPU). Without
// this, on a VM whose CPUs share no cache level, the scheduler wakes a worker onto the caller's own
// CPU and keeps it there, so the two halves of every job run one after the other: measured in a
// pipeline stage that had been idle ~20 ms, 90 % of jobs started on the caller's CPU and the stage
// computed 70 % slower. Nothing is pinned to one CPU, and with more threads than CPUs nothing is set.
// Placement (macOS): threads are not tied to CPUs there; each worker asks for the user-interactive
// QoS class, which keeps it on performance cores (sys::PreferPerformanceCores).
//
// Thread safety: Run() may be called by one thread at a time (it is not reentrant: `fn` must not
// call Run on the same pool). Construction and destruction are not concurrent with Run().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <thread>
#include <vector>

namespace tandem {

// The [begin, end) share of `n` items for thread `index` of `count`, in contiguous chunks whose
// boundaries are multiples of `granule` (except the end).
struct Range {
  int64_t begin;
  int64_t end;
};
Range SplitRange(int64_t n, int index, int count, int64_t granule = 1);

class ThreadPool {
 public:
  // `n_threads` >= 1 counts the caller; n_threads - 1 workers are started.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on every thread, index 0 on the caller, and returns
  // when all calls have returned. Work is split by the callee (see SplitRange). `fn` is called
  // through a pointer, never copied or wrapped: Run allocates nothing.
  template <typename Fn>
  void Run(Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    RunJob({[](void* f, int t, int n) { (*static_cast<F*>(f))(t, n); },
            const_cast<void*>(static_cast<const void*>(&fn))});
  }

  // Calls fn(begin, end) on every thread of the pool for pieces that together cover [0, n) once,
  // piece boundaries on multiples of `granule` (except n). Each thread starts on its own
  // contiguous share (the one SplitRange gives it), front to back in shrinking pieces; a thread
  // that runs out takes pieces from the back of the shares still running. A static split makes
  // every job wait for its slowest thread, and on a shared machine one thread often starts late
  // (a worker waking from sleep: tens of microseconds on a VM, at the first job of every
  // pipeline stage) or loses its CPU for a while; here the others absorb it, while each thread
  // still streams its memory front to back. A few atomic operations per thread and job; no
  // allocation. Same calling rules as Run().
  template <typename Fn>
  void ParallelFor(int64_t n, int64_t granule, Fn&& fn) {
    if (granule < 1) granule = 1;
    const int64_t units = (n + granule - 1) / granule;
    if (n <= 0) return;
    if (n_threads_ == 1 || units >= (int64_t{1} << 31)) {
      Run([&](int t, int c) {
        const Range r = SplitRange(n, t, c, granule);
        if (r.begin < r.end) fn(r.begin, r.end);
      });
      return;
    }
    for (int t = 0; t < n_threads_; ++t) {
      const Range r = SplitRange(units, t, n_threads_, 1);
      shares_[t].span.store(Pack(r.begin, r.end), std::memory_order_relaxed);
    }
    Run([&](int t, int c) {
      auto run = [&](int64_t ub, int64_t ue) {
        fn(ub * granule, ue * granule < n ? ue * granule : n);
      };
      int64_t b, e;
      while (Take(t, true, &b, &e)) run(b, e);
      for (int k = 1; k < c; ++k) {
        while (Take((t + k) % c, false, &b, &e)) run(b, e);
      }
    });
  }

  // How long a worker spins after a job before sleeping (default 50 microseconds).
  void set_spin_microseconds(int us) { spin_us_.store(us, std::memory_order_relaxed); }

 private:
  struct Job {
    void (*call)(void* fn, int thread_index, int n_threads);
    void* fn;
  };
  void RunJob(Job job);

  // ParallelFor's shares, in granules: front in the low 32 bits, back (exclusive) in the high.
  struct alignas(64) Share {
    std::atomic<uint64_t> span{0};
  };
  static uint64_t Pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) | (static_cast<uint64_t>(back) << 32);
  }
  // The next piece [*b, *e) of a share, or false when it is used up: for its owner a quarter of
  // what is left, from the front; for another thread the back half. At least one granule.
  bool Take(int share, bool owner, int64_t* b, int64_t* e);
  void WorkerLoop(int index);
  void KeepWorkersOffCallerCpu();

  const int n_threads_;
  std::vector<std::thread> workers_;
  std::unique_ptr<Share[]> shares_;
  std::atomic<int> spin_us_{50};
  std::atomic<uint32_t> generation_{0};  // bumped once per job; workers wait on it
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<bool> stop_{false};
  Job job_{nullptr, nullptr};
  std::vector<int> cpus_;  // CPUs this process may run on, when there are at least n_threads
  int caller_cpu_ = -1;    // the caller's CPU that the workers' masks exclude
  std::vector<int> others_;  // cpus_ without caller_cpu_ (reused, so jobs do not allocate)
};


}  // namespace tandem
