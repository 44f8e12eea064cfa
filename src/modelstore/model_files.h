// Identifying a GGUF model across machines and finding a worker's local copy of it.
//
// A model is identified by the BLAKE2b-256 digest of its header (every byte before the tensor
// data: metadata, tensor names, types, shapes and offsets) together with its file size: cheap to
// compute on any machine (no weights are read), and it changes whenever the tensor table does.
//
// Thread safety: functions without shared state.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/reader.h"
#include "net/messages.h"

namespace tandem::modelstore {

struct ModelId {
  net::Digest digest{};
  uint64_t file_size = 0;
  std::string Hex() const;  // first 16 hex digits, for messages
};

// Reads the header of the GGUF file at `path` (validating it) and digests it.
Result<ModelId> IdentifyModel(const std::string& path);

// The first of `candidates` (files) then *.gguf in `dir` whose id equals `want`; NotFound
// listing what was tried otherwise.
Result<std::string> FindModel(const ModelId& want, const std::vector<std::string>& candidates,
                              const std::string& dir);

// The byte ranges of the model file a stage needs, in file order: the header (everything before
// the tensor data), the tensors of layers [layer_begin, layer_end), small non-layer tensors, and
// on the last stage the output norm and head (the embedding when the head is tied). A worker
// without the file receives exactly these and stores them at their offsets in a sparse copy,
// which then opens as an ordinary GGUF file.
struct ByteRange {
  uint64_t offset = 0, size = 0;
};
std::vector<ByteRange> StageRanges(const gguf::GgufFile& file, int64_t layer_begin,
                                   int64_t layer_end, bool last);
uint64_t TotalBytes(const std::vector<ByteRange>& ranges);

// Incremental BLAKE2b-256 over the bytes of a transfer, in order.
class Hasher {
 public:
  Hasher();
  void Update(const uint8_t* p, size_t n);
  net::Digest Final();

 private:
  alignas(64) unsigned char state_[384];
};

// The worker's store of weights received from main nodes: sparse copies named by the model's
// identity and layer range, each with the digest of its received ranges beside it
// ("<file>.b2"), verified on every use.
class WeightCache {
 public:
  explicit WeightCache(std::string dir) : dir_(std::move(dir)) {}
  // A verified cached copy holding layers [b, e) (and the head if `last`); NotFound otherwise.
  // A copy that fails verification is deleted.
  Result<std::string> Find(const ModelId& id, int64_t b, int64_t e, bool last) const;
  // Where a new copy of these layers is written first, and its final name.
  std::string TempPath(const ModelId& id, int64_t b, int64_t e, bool last) const;
  std::string FinalPath(const ModelId& id, int64_t b, int64_t e, bool last) const;
  // Verifies `temp` against `digest`, then moves it into place with its digest file.
  Status Commit(const std::string& temp, const ModelId& id, int64_t b, int64_t e, bool last,
                const net::Digest& digest) const;

 private:
  std::string dir_;
};

}  // namespace tandem::modelstore
