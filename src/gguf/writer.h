// GgufWriter: builds a GGUF v3 file from metadata and tensors.
//
// Tensors are written in the order added, each at an offset aligned to `general.alignment`
// (default 32), with zero padding between them. A tensor's bytes come either from a buffer the
// caller hands over or from a fill callback called once, at write time, with a zeroed buffer of
// the tensor's exact size: so multi-gigabyte synthetic models are written one tensor at a time.
//
// Thread safety: none; one writer per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "gguf/format.h"
#include "gguf/value.h"

namespace tandem::gguf {

class GgufWriter {
 public:
  using FillFn = std::function<Status(std::span<uint8_t> out)>;

  // Sets or replaces a metadata entry (insertion order is kept for new keys).
  void Set(std::string key, Value value);

  // Adds a tensor whose bytes are given now. `shape` lists ne[0] (the row) first.
  Status AddTensor(std::string name, TensorType type, std::vector<uint64_t> shape,
                   std::vector<uint8_t> bytes);
  // Adds a tensor whose bytes are produced by `fill` when the file is written.
  Status AddTensor(std::string name, TensorType type, std::vector<uint64_t> shape, FillFn fill);

  // Writes the file to `path` (replacing it). Progress, if given, is called after each tensor.
  Status Write(const std::string& path,
               const std::function<void(size_t done, size_t total)>& progress = {}) const;
  // The whole file in memory (tests, fuzz seeds).
  Result<std::vector<uint8_t>> WriteToBuffer() const;

  // Total bytes of tensor data (without padding).
  uint64_t tensor_bytes() const;

 private:
  struct Tensor {
    std::string name;
    TensorType type;
    std::vector<uint64_t> shape;
    uint64_t n_bytes = 0;
    std::vector<uint8_t> bytes;
    FillFn fill;
  };
  Status CheckTensor(const std::string& name, TensorType type, const std::vector<uint64_t>& shape,
                     uint64_t* n_bytes) const;
  uint64_t Alignment() const;
  Status Emit(const std::function<Status(std::span<const uint8_t>)>& sink,
              const std::function<void(size_t, size_t)>& progress) const;

  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace tandem::gguf
