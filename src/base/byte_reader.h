// ByteReader: bounds-checked little-endian reads from untrusted bytes (files, network frames).
//
// Every read checks that the bytes are there first; a failed read returns a Corruption status
// naming what was being read and the byte offset where it starts, and leaves the cursor unchanged.
// The reader never allocates on behalf of a length it has not checked against the bytes remaining.
//
// Thread safety: a ByteReader is a cursor; use one per thread.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "base/status.h"

namespace tandem {

static_assert(std::endian::native == std::endian::little,
              "tandem reads and writes little-endian formats directly; add byte swaps to port it");

class ByteReader {
 public:
  // `base_offset` is added to offsets in error messages (for readers over a slice of a file).
  explicit ByteReader(std::span<const uint8_t> bytes, uint64_t base_offset = 0)
      : bytes_(bytes), base_(base_offset) {}

  uint64_t offset() const { return base_ + pos_; }  // absolute offset, for messages
  size_t position() const { return pos_; }          // relative to the span
  size_t remaining() const { return bytes_.size() - pos_; }

  // Reads one little-endian arithmetic value.
  template <typename T>
  Result<T> Read(std::string_view what) {
    static_assert(std::is_arithmetic_v<T>);
    if (remaining() < sizeof(T)) return Truncated(what, sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // Returns a view of the next n bytes (no copy).
  Result<std::span<const uint8_t>> ReadBytes(uint64_t n, std::string_view what);

  // Reads a uint64 length followed by that many bytes; fails if the length exceeds `max_len`.
  Result<std::string_view> ReadString64(std::string_view what, uint64_t max_len);

  Status Skip(uint64_t n, std::string_view what);

  // A Corruption status "at byte offset <offset()>: <message>".
  Status Error(std::string_view message) const { return ErrorAt(offset(), message); }
  static Status ErrorAt(uint64_t offset, std::string_view message);

 private:
  Status Truncated(std::string_view what, uint64_t need) const;

  std::span<const uint8_t> bytes_;
  uint64_t base_;
  size_t pos_ = 0;
};

}  // namespace tandem
