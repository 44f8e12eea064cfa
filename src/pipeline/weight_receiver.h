// WeightReceiver: a stage's bytes of the model file arriving from the main node, for a worker
// without a copy. The main node sends WeightsChunk frames (offset, bytes) and then WeightsDone;
// each chunk is written at its offset into a sparse copy of the file. Nothing here trusts the
// bytes: the weight cache (modelstore) checks the finished copy against the model's tensor
// digests before it keeps it.
//
// Thread safety: Chunk and Done from the connection's reader thread, Wait from the thread that
// asked for the weights, Cancel and bytes() from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "net/messages.h"

namespace tandem::pipeline {

class WeightReceiver {
 public:
  WeightReceiver() = default;
  ~WeightReceiver();
  WeightReceiver(const WeightReceiver&) = delete;
  WeightReceiver& operator=(const WeightReceiver&) = delete;

  // Creates the file at `path` (which must not exist: O_EXCL|O_NOFOLLOW, mode 0600) with
  // `file_size` bytes of holes and starts accepting chunks. IOError when it cannot be made.
  Status Open(const std::string& path, uint64_t file_size);

  // One chunk. False when no transfer is open (chunks nobody asked for: a protocol error). A
  // chunk outside the file, or a failed write, fails the transfer (Wait reports why). Sets
  // *progress_due every 200 ms and at the last byte, and *done to the bytes received so far.
  bool Chunk(const net::WeightsChunk& c, bool* progress_due, uint64_t* done);
  // The sender has sent everything. False when no transfer is open.
  bool Done();

  // Blocks until the transfer ends (Ok), fails (why) or is cancelled; closes the file in every
  // case.
  Status Wait();
  void Cancel();

  uint64_t bytes() const { return bytes_.load(); }

 private:
  enum class State { kIdle, kReceiving, kReceived, kFailed, kCancelled };
  void FailLocked(std::string why);

  std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kIdle;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::atomic<uint64_t> bytes_{0};
  std::string error_;
  std::chrono::steady_clock::time_point last_progress_;
};

}  // namespace tandem::pipeline
