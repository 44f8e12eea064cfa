#include "base/large_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "base/sys.h"

namespace tandem {
namespace {
constexpr size_t kHuge = size_t{2} << 20;
}  // namespace

Result<LargeBuffer> LargeBuffer::Allocate(size_t bytes) {
  LargeBuffer b;
  if (bytes == 0) return b;
  if (bytes > (size_t{1} << 50)) return Status::InvalidArgument("buffer of " + std::to_string(bytes) + " bytes is too large");
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  const size_t mapped = size + kHuge;  // room to align the start to 2 MiB
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::IOError("cannot reserve " + std::to_string(size >> 20) + " MiB of memory: " +
                           std::strerror(errno));
  }
  b.base_ = static_cast<uint8_t*>(p);
  b.mapped_ = mapped;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) / kHuge * kHuge;
  b.data_ = reinterpret_cast<uint8_t*>(a);
  b.size_ = size;
  sys::AdviseHugePages(b.data_, b.size_);  // advisory: without THP the pages are just 4 KiB
  return b;
}

LargeBuffer::LargeBuffer(LargeBuffer&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      mapped_(std::exchange(other.mapped_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

LargeBuffer& LargeBuffer::operator=(LargeBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    base_ = std::exchange(other.base_, nullptr);
    mapped_ = std::exchange(other.mapped_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

LargeBuffer::~LargeBuffer() { Reset(); }

void LargeBuffer::Reset() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
  base_ = data_ = nullptr;
  mapped_ = size_ = 0;
}

}  // namespace tandem
