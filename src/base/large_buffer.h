// LargeBuffer: a writable block of anonymous memory for data that is streamed over and over (model
// weights), 2 MiB aligned and advised to use transparent huge pages where the kernel offers them, so
// that reading it costs far fewer TLB misses than reading 4 KiB file pages.
//
// The memory is zero-filled and committed lazily by the kernel. Move-only; views into data() must
// not outlive the object. Thread safety: none of its own (callers share it read-only after filling).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace tandem {

class LargeBuffer {
 public:
  // Reserves `bytes` (rounded up to 2 MiB). IOError when the system refuses.
  static Result<LargeBuffer> Allocate(size_t bytes);

  LargeBuffer() = default;
  LargeBuffer(LargeBuffer&& other) noexcept;
  LargeBuffer& operator=(LargeBuffer&& other) noexcept;
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;
  ~LargeBuffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Reset();

  uint8_t* base_ = nullptr;  // what mmap returned (the aligned data_ lies inside)
  size_t mapped_ = 0;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tandem
