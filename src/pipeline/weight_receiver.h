// WeightReceiver: a stage's bytes of the model file arriving from the main node, for a worker
// without a copy. The main node sends WeightsChunk frames (offset, bytes) and then WeightsDone
// with the digest of everything it sent; each chunk is written at its offset into a sparse copy
// of the file and digested in arrival order, and the copy is good only when the two digests
// match. The weight cache (modelstore) then verifies and keeps it.
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
#include "modelstore/model_files.h"
#include "net/messages.h"

namespace tandem::pipeline {

class WeightReceiver {
 public:
  WeightReceiver() = default;
  ~WeightReceiver();
  WeightReceiver(const WeightReceiver&) = delete;
  WeightReceiver& operator=(const WeightReceiver&) = delete;

  // Creates (or truncates) the file at `path` with `file_size` bytes of holes and starts
  // accepting chunks. IOError when the file cannot be made.
  Status Open(const std::string& path, uint64_t file_size);

  // One chunk. False when no transfer is open (chunks nobody asked for: a protocol error). A
  // chunk outside the file, or a failed write, fails the transfer (Wait reports why). Sets
  // *progress_due every 200 ms and at the last byte, and *done to the bytes received so far.
  bool Chunk(const net::WeightsChunk& c, bool* progress_due, uint64_t* done);
  // The sender's digest. False when no transfer is open.
  bool Done(const net::Digest& sender_digest);

  // Blocks until the transfer succeeds (the digest), fails (why) or is cancelled; closes the
  // file in every case.
  Result<net::Digest> Wait();
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
  std::unique_ptr<modelstore::Hasher> hash_;
  net::Digest digest_{};
  std::string error_;
  std::chrono::steady_clock::time_point last_progress_;
};

}  // namespace tandem::pipeline
