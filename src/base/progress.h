// Progress: the one way tandem reports a long operation (copying weights into memory, loading a
// stage on a worker, sending or receiving weights): lines like
//   "worker 10.0.0.2:50052 (layers 11-21): copying weights  50% (310.2 of 620.4 MiB, 412.3 MiB/s, 1 s left)"
// at most one per quarter of the work or per `interval`, whichever comes first, and always one at
// the end. Below `min_total` bytes nothing is printed (short operations stay quiet).
//
// Thread safety: one Progress per operation, updated from one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace tandem {

// "what  50% (310.2 of 620.4 MiB, 412.3 MiB/s, 1 s left)": the rate of the bytes done after the
// first `since` of them, in `seconds`; rate and time left only when `seconds` > 0 and some bytes
// were done in them.
std::string FormatProgress(const std::string& what, uint64_t done, uint64_t total, double seconds, uint64_t since = 0);

class Progress {
 public:
  using Sink = std::function<void(const std::string&)>;
  Progress(std::string what, Sink sink, uint64_t min_total = 0,
           std::chrono::milliseconds interval = std::chrono::seconds(2));

  // Reports `done` of `total` bytes when a line is due. The rate counts from the first update
  // (an observer of another machine's operation, such as the main node of a worker's load, may
  // first hear of it at its end: then no rate is shown).
  void Update(uint64_t done, uint64_t total);

 private:
  std::string what_;
  Sink sink_;
  uint64_t min_total_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point start_, last_;
  uint64_t start_done_ = 0;
  bool started_ = false;
  int last_quarter_ = -1;
  bool finished_ = false;
};

}  // namespace tandem
