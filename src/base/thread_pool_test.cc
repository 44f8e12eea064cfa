#include "base/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "base/sys.h"

namespace tandem {
namespace {

TEST(SplitRangeTest, CoversEverythingOnceOnGranules) {
  for (int64_t n : {0, 1, 7, 64, 1000, 1023}) {
    for (int count : {1, 2, 3, 8}) {
      for (int64_t g : {1, 4, 16}) {
        int64_t next = 0;
        for (int i = 0; i < count; ++i) {
          Range r = SplitRange(n, i, count, g);
          EXPECT_EQ(r.begin, next);
          EXPECT_LE(r.begin, r.end);
          if (r.end < n) {
            EXPECT_EQ(r.end % g, 0);
          }
          next = r.end;
        }
        EXPECT_EQ(next, n);
      }
    }
  }
}

TEST(ThreadPoolTest, EveryThreadRunsEveryJob) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    std::vector<int64_t> data(10000);
    for (int job = 0; job < 500; ++job) {
      pool.Run([&](int t, int n) {
        Range r = SplitRange(static_cast<int64_t>(data.size()), t, n);
        for (int64_t i = r.begin; i < r.end; ++i) data[i] += i;
      });
    }
    for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<int64_t>(i) * 500);
  }
}

TEST(ThreadPoolTest, ResultsAreVisibleToTheCallerAfterRun) {
  ThreadPool pool(3);
  std::vector<int> seen(3, 0);
  for (int job = 1; job <= 200; ++job) {
    pool.Run([&](int t, int) { seen[t] = job; });
    for (int t = 0; t < 3; ++t) ASSERT_EQ(seen[t], job);
  }
}

TEST(ThreadPoolTest, ParallelForCoversEverythingOnceOnGranules) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 16, 17, 1000, 4099}) {
      for (int64_t g : {1, 16}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> bad_bounds{0};
        for (int job = 0; job < 20; ++job) {
          pool.ParallelFor(n, g, [&](int64_t b, int64_t e) {
            if (b % g != 0 || (e % g != 0 && e != n) || b >= e || e > n) ++bad_bounds;
            for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
          });
        }
        EXPECT_EQ(bad_bounds.load(), 0) << threads << " threads, n " << n << ", granule " << g;
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 20) << "item " << i << " of " << n;
        }
      }
    }
  }
}

// A thread that stalls on its first piece (as a worker waking late, or a preempted CPU) does not
// hold up the job: the other thread takes the rest of its share from the back.
TEST(ThreadPoolTest, ParallelForTakesOverAStalledThreadsShare) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<std::thread::id> by(64);
  std::atomic<bool> stalled{false};
  pool.ParallelFor(64, 1, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() == caller && !stalled.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (int64_t i = b; i < e; ++i) by[static_cast<size_t>(i)] = std::this_thread::get_id();
  });
  int taken = 0;  // items of the caller's share [0, 32) run by the worker
  for (int i = 0; i < 32; ++i) taken += by[i] != caller;
  EXPECT_GE(taken, 12) << "the worker ran " << taken << " of the stalled caller's 32 items";
  for (int i = 32; i < 64; ++i) EXPECT_NE(by[i], caller) << "item " << i;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

TEST(ThreadPoolTest, IdlePoolDoesNotBurnCpu) {
  ThreadPool pool(4);
  pool.Run([](int, int) {});
  const double before = CpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double used = CpuSeconds() - before;
  // Three spinning workers would use ~0.9 s of CPU here; sleeping ones use almost none.
  EXPECT_LT(used, 0.05) << "idle workers used " << used << " s of CPU in 0.3 s";
}

// The workers are kept off the caller's CPU (see thread_pool.h): with the caller held on one CPU,
// a worker's own CPU set, read inside the job, leaves that CPU out and keeps every other one; when
// the caller moves, the sets follow. With more threads than CPUs nothing is changed.
TEST(ThreadPoolTest, WorkersKeepOffTheCallersCpu) {
  if (!sys::PlacesThreadsByCpu()) GTEST_SKIP() << sys::SystemName() << " places threads by QoS";
  const std::vector<int> cpus = sys::CallingThreadCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << cpus.size();
  auto contains = [](const std::vector<int>& v, int c) {
    return std::find(v.begin(), v.end(), c) != v.end();
  };
  // Each worker's CPU set, as the worker itself sees it during a job.
  auto worker_cpus = [](ThreadPool& pool) {
    std::vector<std::vector<int>> sets(pool.size());
    pool.Run([&](int t, int) { sets[t] = sys::CallingThreadCpus(); });
    return sets;
  };
  {
    ThreadPool pool(2);
    for (int caller : {cpus[0], cpus[1], cpus[0]}) {
      ASSERT_TRUE(sys::SetCallingThreadCpus({caller}));
      const std::vector<std::vector<int>> sets = worker_cpus(pool);
      EXPECT_FALSE(contains(sets[1], caller)) << "caller on CPU " << caller;
      for (int c : cpus) {
        if (c != caller) {
          EXPECT_TRUE(contains(sets[1], c)) << "CPU " << c << ", caller on " << caller;
        }
      }
    }
  }
  ASSERT_TRUE(sys::SetCallingThreadCpus(cpus));
  {
    ThreadPool pool(static_cast<int>(cpus.size()) + 1);  // oversubscribed: sets untouched
    const std::vector<std::vector<int>> sets = worker_cpus(pool);
    for (int t = 1; t < pool.size(); ++t) EXPECT_EQ(sets[t], cpus) << "worker " << t;
  }
}

}  // namespace
}  // namespace tandem
