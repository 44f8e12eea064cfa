#include "pipeline/weight_receiver.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem::pipeline {

WeightReceiver::~WeightReceiver() {
  if (fd_ >= 0) ::close(fd_);
}

Status WeightReceiver::Open(const std::string& path, uint64_t file_size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kCancelled) return Status::IOError("the session ended before receiving weights");
  }
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError("cannot create " + path + ": " + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(file_size)) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IOError("cannot size " + path + ": " + std::strerror(err));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kCancelled) {  // cancelled meanwhile
    ::close(fd);
    return Status::IOError("the session ended before receiving weights");
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  size_ = file_size;
  bytes_ = 0;
  state_ = State::kReceiving;
  error_.clear();
  last_progress_ = std::chrono::steady_clock::now();
  return Status::Ok();
}

void WeightReceiver::FailLocked(std::string why) {
  state_ = State::kFailed;
  error_ = std::move(why);
  cv_.notify_all();
}

bool WeightReceiver::Chunk(const net::WeightsChunk& c, bool* progress_due, uint64_t* done) {
  std::lock_guard<std::mutex> lock(mu_);
  *progress_due = false;
  *done = bytes_;
  if (state_ == State::kFailed || state_ == State::kCancelled) return true;  // ignored: already over
  if (state_ != State::kReceiving) return false;
  if (c.offset > size_ || c.bytes.size() > size_ - c.offset) {
    FailLocked("a weights chunk lies outside the model file");
    return true;
  }
  for (size_t off = 0; off < c.bytes.size();) {
    const ssize_t n = ::pwrite(fd_, c.bytes.data() + off, c.bytes.size() - off,
                               static_cast<off_t>(c.offset + off));
    if (n <= 0) {
      FailLocked(std::string("cannot write received weights: ") + std::strerror(errno));
      return true;
    }
    off += static_cast<size_t>(n);
  }
  bytes_ += c.bytes.size();
  *done = bytes_;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_progress_ > std::chrono::milliseconds(200) || *done == c.total) {
    last_progress_ = now;
    *progress_due = true;
  }
  return true;
}

bool WeightReceiver::Done() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kFailed || state_ == State::kCancelled) return true;
  if (state_ != State::kReceiving) return false;
  state_ = State::kReceived;
  cv_.notify_all();
  return true;
}

Status WeightReceiver::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return state_ != State::kReceiving; });
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  switch (state_) {
    case State::kReceived: return Status::Ok();
    case State::kCancelled: return Status::IOError("the session ended while receiving weights");
    case State::kIdle: return Status::Internal("no transfer was opened");
    default: return Status::IOError(error_);
  }
}

void WeightReceiver::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kReceiving || state_ == State::kIdle) state_ = State::kCancelled;
  cv_.notify_all();
}

}  // namespace tandem::pipeline
