// MappedFile: a read-only memory map of a whole file.
//
// The mapping lives as long as the object; views into data() must not outlive it. Move-only.
// Thread safety: const access from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace tandem {

// Tells the kernel that this process no longer needs the whole pages inside [p, p + n) of a
// read-only file mapping: they leave its resident set (they stay in the page cache, and reading
// them again faults them back in). Advisory; does nothing for other memory or on failure.
void ReleaseMappedPages(const void* p, size_t n);

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to an empty span (no mmap call is made).
  static Result<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void Reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace tandem
