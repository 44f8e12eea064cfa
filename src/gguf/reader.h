// GgufFile: a validated, read-only view of a GGUF v2/v3 file (see docs/gguf.md).
//
// Open() maps the file; Parse() reads bytes the caller owns. Everything read from the bytes is
// validated before use (magic, version, counts, lengths, types, dimensions, offsets, alignment,
// duplicates, overlaps) and a malformed file yields a Corruption or Unsupported status naming the
// problem and its byte offset. No allocation is sized by a field before that field is checked
// against the bytes that remain, so a hostile file cannot make the reader allocate more than a
// small multiple of its own size.
//
// Thread safety: immutable after construction; const methods may be called from any thread.
// Lifetime: tensor data pointers point into the mapping (Open) or into the caller's bytes (Parse);
// for Parse, the bytes must outlive the GgufFile. Moving a GgufFile keeps its pointers valid.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "gguf/format.h"
#include "gguf/value.h"

namespace tandem::gguf {

// Hard limits on what the reader accepts, beyond what the file's size already bounds.
inline constexpr uint64_t kMaxKeyLength = 65535;
inline constexpr uint64_t kMaxTensorNameLength = 65535;
inline constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::kF32;
  uint32_t n_dims = 0;
  // ne[0] is the innermost dimension (a row); dimensions past n_dims are 1.
  std::array<uint64_t, kMaxDims> ne = {1, 1, 1, 1};
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t offset = 0;       // relative to the start of the data section
  uint64_t file_offset = 0;  // absolute position in the file
  const uint8_t* data = nullptr;

  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(n_bytes)}; }
  // Bytes of one row (ne[0] elements).
  uint64_t row_bytes() const;
  // "[2048, 5632]"
  std::string ShapeString() const;
};

class GgufFile {
 public:
  static Result<GgufFile> Open(const std::string& path);
  static Result<GgufFile> Parse(std::span<const uint8_t> bytes);

  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* Find(std::string_view key) const;

  // Typed look-ups. NotFound if the key is absent; InvalidArgument naming the key and both types
  // if the stored type does not fit. Integer look-ups accept any integer type whose value fits.
  Result<std::string> GetString(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;
  Result<uint32_t> GetUint32(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;  // float or integer types
  Result<bool> GetBool(std::string_view key) const;
  Result<const Array*> GetArray(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  Status ParseAll(std::span<const uint8_t> bytes);

  std::optional<MappedFile> mapping_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace tandem::gguf
